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
}
