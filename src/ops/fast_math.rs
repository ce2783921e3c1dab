//! Elementwise math the CPU ops share, written as plain arithmetic that the
//! compiler turns into vector instructions (a libm call per element cannot be
//! vectorized, and was a fifth of the softmax and most of the MLP's activation).
//!
//! Invariant: every function is a pure function of its argument, computed the
//! same way whatever the slice or call it runs in, so an element's bits never
//! depend on batching or chunking.

/// `e^x` for `x ≤ 0` (the softmax's, and the gated activations' sigmoid), in plain
/// arithmetic the compiler vectorizes (the libm call it replaces was a fifth of prefill
/// attention):
/// `x = n·ln2 + r` with `|r| ≤ ln2/2`, a degree-6 polynomial for `e^r`
/// (Cephes' `expf` coefficients, within 2 ulp), times `2^n` built in the
/// exponent bits. Below −87 (where `e^x` is under f32's normal range) it is 0.
///
/// `n` is rounded, and `2^n` built, with float adds of 1.5·2²³ (whose last
/// mantissa bits then hold the integer) rather than `round` and `as i32`:
/// those compiled to a scalar convert with NaN and range checks per lane,
/// a fifth of the softmax's time.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    /// 1.5·2²³: `y + ROUND - ROUND` is `y` rounded to the nearest integer (ties to even) for `|y| < 2²²`.
    const ROUND: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let e_r = p * r * r + r + 1.0;
    // n + 127 ∈ [1, 127] sits in the low mantissa bits of `n + 127 + ROUND` (exact: an
    // integer under 2²⁴); shifted up by 23 they are the exponent field of 2^n.
    let scale = f32::from_bits((n + (127.0 + ROUND)).to_bits() << 23);
    if x <= -87.0 {
        0.0
    } else {
        e_r * scale
    }
}

/// `tanh(x)` (Gemma 2's soft caps), in plain arithmetic the compiler vectorizes: an odd
/// Taylor polynomial to `x⁹` for `|x| < 1/8` (the next term is under 1e-9 of the result),
/// else `(1 − e)/(1 + e)` with `e = e^(−2|x|)` from [`exp`], signed as `x`. Within about
/// 1e-6 of the result everywhere (the subtraction loses a few bits just above 1/8).
#[inline(always)]
pub(super) fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let e = exp(-2.0 * a);
    let far = (1.0 - e) / (1.0 + e);
    let x2 = a * a;
    // tanh a = a − a³/3 + 2a⁵/15 − 17a⁷/315 + 62a⁹/2835 − …
    let near = a * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0)))));
    let t = if a < 0.125 { near } else { far };
    t.copysign(x)
}

/// `c · tanh(s / c)` of every score in place: Gemma 2's soft cap on attention scores.
#[inline(always)]
pub(super) fn softcap(v: &mut [f32], c: f32) {
    let inv = 1.0 / c;
    for s in v.iter_mut() {
        *s = c * tanh(*s * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        let mut x = -90.0f32;
        while x <= 0.0 {
            let (ours, libm) = (exp(x), x.exp());
            if x > -87.0 {
                assert!(
                    (ours - libm).abs() <= 4.0 * f32::EPSILON * libm,
                    "exp({x}) = {ours}, libm {libm}"
                );
            } else {
                assert!(ours == 0.0 && libm < 1.7e-38, "exp({x}) = {ours}, libm {libm}");
            }
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn tanh_is_within_1e6_of_libm() {
        let mut x = -12.0f32;
        while x <= 12.0 {
            let (ours, libm) = (tanh(x), x.tanh());
            assert!((ours - libm).abs() <= 1e-6 * libm.abs().max(1e-3), "tanh({x}) = {ours}, libm {libm}");
            x += 0.00731;
        }
        for x in [0.0f32, -0.0, 1e-30, -1e-30, 0.125, -0.125, 40.0, -40.0, 1e30, -1e30] {
            let (ours, libm) = (tanh(x), x.tanh());
            assert!((ours - libm).abs() <= 1e-6 * libm.abs().max(1e-30), "tanh({x}) = {ours}, libm {libm}");
            assert_eq!(ours.is_sign_negative(), x.is_sign_negative(), "tanh({x})");
        }
    }
}
