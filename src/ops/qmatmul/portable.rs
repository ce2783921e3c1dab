//! The portable kernel: plain Rust, the reference every SIMD path must equal.
//!
//! It does the SIMD kernels' arithmetic in the same order: integer dot
//! products per block (exact), then per block one fused multiply-add of the
//! dot with `d_w · d_a` and one of the min term, so its results are
//! bit-identical to theirs.

use super::acts::QuantActs;
use super::format::QuantKind;
use super::pack::{h2f, PackedMatrix, GROUP};

/// `out[i·8 + r]` = row `8g + r` of `m` dotted with activation row `i`, for
/// every row `i` of `acts`; `w` is group `g`'s unpacked quants.
pub(super) fn group(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, out: &mut [f32]) {
    for i in 0..acts.t {
        let a = acts.row_q(i);
        let acc = if m.kind.is_super() {
            super_row(m, g, w, acts, i, a)
        } else {
            block_row(m, g, w, acts, i, a)
        };
        out[i * GROUP..(i + 1) * GROUP].copy_from_slice(&acc);
    }
}

fn dot(w: &[u8], a: &[i8], r: usize, first_chunk: usize, chunks: usize, signed: bool) -> i32 {
    let mut s = 0i32;
    for c in first_chunk..first_chunk + chunks {
        for j in 0..4 {
            let q = w[c * 32 + r * 4 + j];
            let q = if signed { q as i8 as i32 } else { q as i32 };
            s += q * a[c * 4 + j] as i32;
        }
    }
    s
}

fn block_row(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, i: usize, a: &[i8]) -> [f32; GROUP] {
    let nb = m.k / 32;
    let mut acc = [0f32; GROUP];
    for b in 0..nb {
        let da = acts.d[i * nb + b];
        let dsum = acts.sums[i * nb + b].0;
        let si = m.scale_at(g, b);
        for (r, acc) in acc.iter_mut().enumerate() {
            let s = dot(w, a, r, b * 8, 8, m.kind.signed());
            let d = h2f(m.d[si + r]);
            *acc = (s as f32).mul_add(d * da, *acc);
            match m.kind {
                QuantKind::Q4_0 => *acc = (-(d * 8.0)).mul_add(dsum, *acc),
                QuantKind::Q5_0 => *acc = (-(d * 16.0)).mul_add(dsum, *acc),
                QuantKind::Q4_1 | QuantKind::Q5_1 => *acc = (-h2f(m.m[si + r])).mul_add(dsum, *acc),
                _ => {}
            }
        }
    }
    acc
}

fn super_row(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, i: usize, a: &[i8]) -> [f32; GROUP] {
    let nsb = m.k / 256;
    let subs = m.kind.subs();
    let pairs = subs / 2;
    let sub_chunks = m.kind.sub_elems() / 4;
    let offset = m.kind.sub_offset();
    let off = offset.is_some();
    // IQ4_XS: signed values, neither offset nor mins.
    let signed = m.kind.signed();
    let mut acc = [0f32; GROUP];
    for sb in 0..nsb {
        let da = acts.d[i * nsb + sb];
        let si = m.scale_at(g, sb);
        for (r, acc) in acc.iter_mut().enumerate() {
            let (mut isum, mut msum) = (0i32, 0i32);
            for j in 0..subs {
                let at = m.sub_at(g, sb, j / 2) + r * 2 + j % 2;
                let sc = m.sc[at] as i32;
                let s = dot(w, a, r, (sb * 256 + j * m.kind.sub_elems()) / 4, sub_chunks, signed);
                isum += sc * s;
                if signed {
                    continue;
                }
                let pair = acts.sum_pairs[(i * nsb + sb) * pairs + j / 2];
                let bsum = ((pair >> (16 * (j % 2))) as u16 as i16) as i32;
                msum += if off { sc } else { m.mn[at] as i32 } * bsum;
            }
            if let Some(o) = offset {
                msum *= o;
            }
            let d = h2f(m.d[si + r]);
            *acc = (isum as f32).mul_add(d * da, *acc);
            if !signed {
                let dmin = if off { d } else { h2f(m.m[si + r]) };
                *acc = (-(msum as f32)).mul_add(dmin * da, *acc);
            }
        }
    }
    acc
}
