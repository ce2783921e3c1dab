//! The portable kernel: any CPU, and the reference the SIMD paths equal bit for bit.
//!
//! Each output is `acc = x[c].mul_add(w[c], acc)` over the columns in order from zero (a
//! fused multiply-add, as the vector kernels' `vfmadd231ps`); sixteen rows of a strip side
//! by side, which the compiler vectorizes where the target has fused multiply-adds.

use super::{Panel, STRIP};

/// The panel's strips against every activation row.
pub(super) fn panel(p: &Panel<'_>, widened: &mut Vec<f32>) {
    let k = p.m.k;
    for s in 0..p.strips {
        let w = p.widened(s, 1, widened);
        for (i, x) in p.x.chunks_exact(k).enumerate() {
            let mut acc = [0f32; STRIP];
            for (&xv, col) in x.iter().zip(w.chunks_exact(STRIP)) {
                for (a, &wv) in acc.iter_mut().zip(col) {
                    *a = xv.mul_add(wv, *a);
                }
            }
            p.store::<1, 1>(i, s, &[[acc]]);
        }
    }
}
