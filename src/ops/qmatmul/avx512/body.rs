// The AVX-512 kernels' body, written once over the 512-bit intrinsics it
// names. `hw` includes it with `std::arch` (its entry points carry the
// `#[target_feature]`s); in tests `emu` includes it with plain-Rust ops of the
// same names and meaning, so the body's indexing and lane order run on every
// machine. Everything here is `#[inline(always)]`: it must land inside a
// function that enables the features.
//
// A 512-bit vector holds two groups: lanes 0-7 are group g's eight rows and
// lanes 8-15 group g+1's, so each activation broadcast feeds sixteen rows. The
// integer and float steps are those of `super::super::avx2` (and of the
// portable kernel), so results are bit-identical to both.

/// The two groups' block at `p0`, `p1` (packed), unpacked: chunk `c`'s vector.
#[inline(always)]
unsafe fn unpack_pair_block(bits: usize, p0: *const u8, p1: *const u8) -> [__m512i; 8] {
    let mut u = [_mm512_setzero_si512(); 8];
    if bits == 8 {
        for (c, u) in u.iter_mut().enumerate() {
            *u = load2(p0.add(c * 32), p1.add(c * 32));
        }
        return u;
    }
    if bits == 2 {
        // Bits 2b..2b+2 of plane h are chunk 4h+b's value.
        let m3 = _mm512_set1_epi8(3);
        for h in 0..2 {
            let v = load2(p0.add(32 * h), p1.add(32 * h));
            u[4 * h] = _mm512_and_si512(v, m3);
            u[4 * h + 1] = _mm512_and_si512(_mm512_srli_epi16::<2>(v), m3);
            u[4 * h + 2] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m3);
            u[4 * h + 3] = _mm512_and_si512(_mm512_srli_epi16::<6>(v), m3);
        }
        return u;
    }
    let m0f = _mm512_set1_epi8(0x0F);
    for c in 0..4 {
        let v = load2(p0.add(c * 32), p1.add(c * 32));
        u[c] = _mm512_and_si512(v, m0f);
        u[c + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m0f);
    }
    match bits {
        5 => {
            // Bit c of each byte is chunk c's fifth bit: move it to bit 4.
            let h = load2(p0.add(128), p1.add(128));
            let b4 = _mm512_set1_epi8(0x10);
            u[0] = _mm512_or_si512(u[0], _mm512_and_si512(_mm512_slli_epi16::<4>(h), b4));
            u[1] = _mm512_or_si512(u[1], _mm512_and_si512(_mm512_slli_epi16::<3>(h), b4));
            u[2] = _mm512_or_si512(u[2], _mm512_and_si512(_mm512_slli_epi16::<2>(h), b4));
            u[3] = _mm512_or_si512(u[3], _mm512_and_si512(_mm512_slli_epi16::<1>(h), b4));
            u[4] = _mm512_or_si512(u[4], _mm512_and_si512(h, b4));
            u[5] = _mm512_or_si512(u[5], _mm512_and_si512(_mm512_srli_epi16::<1>(h), b4));
            u[6] = _mm512_or_si512(u[6], _mm512_and_si512(_mm512_srli_epi16::<2>(h), b4));
            u[7] = _mm512_or_si512(u[7], _mm512_and_si512(_mm512_srli_epi16::<3>(h), b4));
        }
        6 => {
            // Bits 2b..2b+2 of plane h are chunk 4h+b's fifth and sixth bits: move them to bits 4-5.
            let b45 = _mm512_set1_epi8(0x30);
            for h in 0..2 {
                let v = load2(p0.add(128 + 32 * h), p1.add(128 + 32 * h));
                let c = 4 * h;
                u[c] = _mm512_or_si512(u[c], _mm512_and_si512(_mm512_slli_epi16::<4>(v), b45));
                u[c + 1] = _mm512_or_si512(u[c + 1], _mm512_and_si512(_mm512_slli_epi16::<2>(v), b45));
                u[c + 2] = _mm512_or_si512(u[c + 2], _mm512_and_si512(v, b45));
                u[c + 3] = _mm512_or_si512(u[c + 3], _mm512_and_si512(_mm512_srli_epi16::<2>(v), b45));
            }
        }
        _ => {}
    }
    u
}

/// Unpacks groups `g` and `g+1`'s packed quants into `out`: 512 bytes per
/// block, chunk `c`'s 64-byte vector at `64c`.
#[inline(always)]
unsafe fn unpack_pair(m: &PackedMatrix, g: usize, out: &mut [u8]) {
    let blocks = out.len() / 512;
    debug_assert!(blocks <= m.k / 32 && g + 1 < m.groups());
    for b in 0..blocks {
        let u = pair_chunks::<true>(m, g, &[], b);
        let o = out.as_mut_ptr().add(b * 512);
        for (c, u) in u.iter().enumerate() {
            store(o.add(c * 64), *u);
        }
    }
}

/// Block `b`'s eight chunks: unpacked here from groups `g` and `g+1`'s packed
/// quants (`FUSED`), or loaded from the pair unpacked beforehand (`w`).
#[inline(always)]
unsafe fn pair_chunks<const FUSED: bool>(m: &PackedMatrix, g: usize, w: &[u8], b: usize) -> [__m512i; 8] {
    if FUSED {
        let q = m.qs.as_ptr();
        let mut u = unpack_pair_block(m.kind.bits(), q.add(m.q_at(g, b)), q.add(m.q_at(g + 1, b)));
        if let Some(t) = m.kind.table() {
            // A table kind's indices looked up (`vpshufb`, within each 128-bit lane).
            let lut = load_table(t);
            for u in u.iter_mut() {
                *u = _mm512_shuffle_epi8(lut, *u);
            }
        }
        return u;
    }
    let p = w.as_ptr().add(b * 512);
    let mut u = [_mm512_setzero_si512(); 8];
    for (c, u) in u.iter_mut().enumerate() {
        *u = load(p.add(c * 64));
    }
    u
}

/// An activation row's four quants of chunk `c`, broadcast to every lane.
#[inline(always)]
unsafe fn bcast(a: *const i8, c: usize) -> __m512i {
    _mm512_set1_epi32(std::ptr::read_unaligned(a.add(4 * c) as *const i32))
}

/// `acc + Σ₄ u·s` per 32-bit lane (`u` unsigned, `s` signed, no saturation
/// for `u ≤ 128`, `|s| ≤ 127`): `vpdpbusd`, or `vpmaddubsw` + `vpmaddwd`.
#[inline(always)]
unsafe fn dot4<const VNNI: bool>(acc: __m512i, u: __m512i, s: __m512i, ones: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpbusd_epi32(acc, u, s)
    } else {
        _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), ones))
    }
}

/// Groups `g`, `g+1` against activation rows `i0..i0+R`, into
/// `out0[(i0+x)·8 ..]` and `out1[(i0+x)·8 ..]`.
#[inline(always)]
unsafe fn block_pair<const R: usize, const FUSED: bool, const VNNI: bool>(
    m: &PackedMatrix,
    g: usize,
    w: &[u8],
    acts: &QuantActs,
    i0: usize,
    (out0, out1): (&mut [f32], &mut [f32]),
) {
    let nb = m.k / 32;
    let bits = m.kind.bits();
    debug_assert!(i0 + R <= acts.t && out0.len() >= acts.t * GROUP && out1.len() >= acts.t * GROUP);
    let ones = _mm512_set1_epi16(1);
    let eight = _mm512_set1_ps(8.0);
    let sixteen = _mm512_set1_ps(16.0);
    // Chunks of int16 pairs summed before they could saturate (2 · (2^bits − 1) · 127 each).
    let per_madd = if bits == 4 { 8 } else { 4 };
    let a: [*const i8; R] = std::array::from_fn(|x| acts.row_q(i0 + x).as_ptr());
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let (s0, s1) = (m.scale_at(g, b), m.scale_at(g + 1, b));
        let dv = load_f16x16(m.d.as_ptr().add(s0), m.d.as_ptr().add(s1));
        let u = pair_chunks::<FUSED>(m, g, w, b);
        // Two sums per row (even and odd chunks): `vpdpbusd` adds into its
        // accumulator, so one sum would be a chain of eight dependent steps.
        let mut dot = [[_mm512_setzero_si512(); 2]; R];
        if m.kind.signed() && VNNI {
            // `vpdpbusd` sums into 32 bits, so `w + 128` (`w ^ 0x80`, unsigned) cannot
            // saturate: one instruction per row, then `128 · Σ a` off. The same integers.
            let bias = _mm512_set1_epi8(-128);
            for (c, &wv) in u.iter().enumerate() {
                let wu = _mm512_xor_si512(wv, bias);
                for x in 0..R {
                    dot[x][c & 1] = _mm512_dpbusd_epi32(dot[x][c & 1], wu, bcast(a[x], b * 8 + c));
                }
            }
            for x in 0..R {
                let qs = acts.sums.get_unchecked((i0 + x) * nb + b).1;
                dot[x][0] = _mm512_sub_epi32(dot[x][0], _mm512_set1_epi32(qs << 7));
            }
        } else if m.kind.signed() {
            // Signed weights: |w| against the activation given w's sign.
            for (c, &wv) in u.iter().enumerate() {
                let aw = _mm512_abs_epi8(wv);
                let neg = _mm512_movepi8_mask(wv);
                for x in 0..R {
                    let av = bcast(a[x], b * 8 + c);
                    let av = _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av);
                    dot[x][c & 1] = dot4::<VNNI>(dot[x][c & 1], aw, av, ones);
                }
            }
        } else if VNNI {
            for (c, &wv) in u.iter().enumerate() {
                for x in 0..R {
                    dot[x][c & 1] = _mm512_dpbusd_epi32(dot[x][c & 1], wv, bcast(a[x], b * 8 + c));
                }
            }
        } else {
            let mut p = [_mm512_setzero_si512(); R];
            for (c, &wv) in u.iter().enumerate() {
                for x in 0..R {
                    p[x] = _mm512_add_epi16(p[x], _mm512_maddubs_epi16(wv, bcast(a[x], b * 8 + c)));
                }
                if (c + 1) % per_madd == 0 {
                    for x in 0..R {
                        dot[x][0] = _mm512_add_epi32(dot[x][0], _mm512_madd_epi16(p[x], ones));
                        p[x] = _mm512_setzero_si512();
                    }
                }
            }
        }
        let mv = match m.kind {
            QuantKind::Q4_0 => Some(_mm512_mul_ps(dv, eight)),
            QuantKind::Q5_0 => Some(_mm512_mul_ps(dv, sixteen)),
            QuantKind::Q4_1 | QuantKind::Q5_1 => Some(load_f16x16(m.m.as_ptr().add(s0), m.m.as_ptr().add(s1))),
            _ => None,
        };
        for x in 0..R {
            let at = (i0 + x) * nb + b;
            let da = _mm512_set1_ps(*acts.d.get_unchecked(at));
            let dot = _mm512_add_epi32(dot[x][0], dot[x][1]);
            acc[x] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dv, da), acc[x]);
            if let Some(mv) = mv {
                acc[x] = _mm512_fnmadd_ps(mv, _mm512_set1_ps(acts.sums.get_unchecked(at).0), acc[x]);
            }
        }
    }
    for x in 0..R {
        let at = (i0 + x) * GROUP;
        store_halves(acc[x], out0.as_mut_ptr().add(at), out1.as_mut_ptr().add(at));
    }
}

/// Picks, in each 32-bit lane (row), the int16 sub-scale of half 0 or 1 of
/// a `[row][2]` pair, into both of the lane's int16s (`vpshufb` works per 128
/// bits, so the pattern repeats four times).
const DUP: [[u8; 64]; 2] = {
    let mut d = [[0u8; 64]; 2];
    let mut i = 0;
    while i < 64 {
        let lane = (i % 16) / 4;
        d[0][i] = (lane * 4 + i % 2) as u8;
        d[1][i] = (lane * 4 + 2 + i % 2) as u8;
        i += 1;
    }
    d
};

/// The K-quant kernel; see [`block_pair`].
#[inline(always)]
unsafe fn super_pair<const R: usize, const FUSED: bool, const VNNI: bool>(
    m: &PackedMatrix,
    g: usize,
    w: &[u8],
    acts: &QuantActs,
    i0: usize,
    (out0, out1): (&mut [f32], &mut [f32]),
) {
    let kind = m.kind;
    let nsb = m.k / 256;
    debug_assert!(i0 + R <= acts.t && out0.len() >= acts.t * GROUP && out1.len() >= acts.t * GROUP);
    let pairs = kind.subs() / 2;
    // Chunks of int16 pairs summed before they could saturate: 2 · (2^bits − 1) · 127 each.
    // (IQ4_XS's `|w| · ±a`, up to 2 · 127 · 127, not even two: `signed` below.)
    let per_madd = match kind {
        QuantKind::Q4K => 8,
        QuantKind::Q5K | QuantKind::Q3K | QuantKind::Q2K => 4,
        _ => 2,
    };
    // Q6_K and Q3_K: the offset weighed by the sub-scales (`off`; Q4_K, Q5_K and Q2_K: mins;
    // IQ4_XS: signed values, neither).
    // Q6_K, Q3_K and Q2_K: 16-value sub-blocks, two per 32-value block (`sub16`).
    let off = kind.sub_offset().is_some();
    let signed = kind.signed();
    let sub16 = kind.sub_elems() == 16;
    let dup = [load(DUP[0].as_ptr()), load(DUP[1].as_ptr())];
    let a: [*const i8; R] = std::array::from_fn(|x| acts.row_q(i0 + x).as_ptr());
    let mut acc = [_mm512_setzero_ps(); R];
    for sb in 0..nsb {
        let (s0, s1) = (m.scale_at(g, sb), m.scale_at(g + 1, sb));
        let dv = load_f16x16(m.d.as_ptr().add(s0), m.d.as_ptr().add(s1));
        let dmv = if off || signed { dv } else { load_f16x16(m.m.as_ptr().add(s0), m.m.as_ptr().add(s1)) };
        // Pair p's `[row][2]` sub-scales (or sub-mins) of both groups, as int16.
        let subs16 = |v: &[i8], p: usize| {
            load_i8x16x2_i16(v.as_ptr().add(m.sub_at(g, sb, p)), v.as_ptr().add(m.sub_at(g + 1, sb, p)))
        };
        let sum_pair = |x: usize, p: usize| *acts.sum_pairs.get_unchecked(((i0 + x) * nsb + sb) * pairs + p);
        let mut isum = [_mm512_setzero_si512(); R];
        let mut msum = [_mm512_setzero_si512(); R];
        for p in (0..pairs).filter(|_| !signed) {
            let mnp = subs16(if off { &m.sc } else { &m.mn }, p);
            for x in 0..R {
                let sums = _mm512_set1_epi32(sum_pair(x, p));
                msum[x] = _mm512_add_epi32(msum[x], _mm512_madd_epi16(mnp, sums));
            }
        }
        for j in 0..8 {
            let b = sb * 8 + j;
            let u = pair_chunks::<FUSED>(m, g, w, b);
            // Q4_K/Q5_K: block j is sub-block j (pair j/2, half j%2). Q6_K: block j is
            // sub-blocks 2j and 2j+1 (pair j; chunks 0-3 and 4-7).
            let scp = subs16(&m.sc, if sub16 { j } else { j / 2 });
            if VNNI {
                // IQ4_XS: each row's sum of this 32-value sub-block (of its pair's two).
                let bsums: [i32; R] = std::array::from_fn(|x| match signed {
                    true => (sum_pair(x, j / 2) >> (16 * (j % 2))) as u16 as i16 as i32,
                    false => 0,
                });
                super_block_vnni::<R>(kind, &u, scp, &a, (b, j), bsums, &mut isum);
            } else {
                if signed {
                    // |w| against the activation given w's sign (see `block_pair`), each chunk's
                    // int16 pairs straight into `vpmaddwd` with the sub-scale (32-value sub-blocks).
                    let scv = _mm512_shuffle_epi8(scp, dup[j % 2]);
                    for (c, &wv) in u.iter().enumerate() {
                        let (aw, neg) = (_mm512_abs_epi8(wv), _mm512_movepi8_mask(wv));
                        for x in 0..R {
                            let av = bcast(a[x], b * 8 + c);
                            let p = _mm512_maddubs_epi16(aw, _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av));
                            isum[x] = _mm512_add_epi32(isum[x], _mm512_madd_epi16(p, scv));
                        }
                    }
                    continue;
                }
                let mut pp = [_mm512_setzero_si512(); R];
                for (c, &wv) in u.iter().enumerate() {
                    for x in 0..R {
                        pp[x] = _mm512_add_epi16(pp[x], _mm512_maddubs_epi16(wv, bcast(a[x], b * 8 + c)));
                    }
                    if (c + 1) % per_madd == 0 {
                        let half = if sub16 { c / 4 } else { j % 2 };
                        let scv = _mm512_shuffle_epi8(scp, dup[half]);
                        for x in 0..R {
                            isum[x] = _mm512_add_epi32(isum[x], _mm512_madd_epi16(pp[x], scv));
                            pp[x] = _mm512_setzero_si512();
                        }
                    }
                }
            }
        }
        for x in 0..R {
            let da = _mm512_set1_ps(*acts.d.get_unchecked((i0 + x) * nsb + sb));
            acc[x] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[x]), _mm512_mul_ps(dv, da), acc[x]);
            if signed {
                continue;
            }
            let ms = match kind {
                QuantKind::Q6K => _mm512_slli_epi32::<5>(msum[x]),
                QuantKind::Q3K => _mm512_slli_epi32::<2>(msum[x]),
                _ => msum[x],
            };
            acc[x] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dmv, da), acc[x]);
        }
    }
    for x in 0..R {
        let at = (i0 + x) * GROUP;
        store_halves(acc[x], out0.as_mut_ptr().add(at), out1.as_mut_ptr().add(at));
    }
}

/// Block `b` (the `j`-th of its superblock) of a 256-value kind with `vpdpbusd`, both groups:
/// each sub-block's int32 dot times its sub-scale (from `scp`, the block's pair or pairs of
/// int16 sub-scales, sign-extended), into `isum`. A signed kind's (IQ4_XS's) values go in as
/// `w + 128` (see [`block_pair`]) and `128 · Σ a` of the sub-block (`bsums`) comes off: its
/// signed dot, exact.
#[inline(always)]
unsafe fn super_block_vnni<const R: usize>(
    kind: QuantKind,
    u: &[__m512i; 8],
    scp: __m512i,
    a: &[*const i8; R],
    (b, j): (usize, usize),
    bsums: [i32; R],
    isum: &mut [__m512i; R],
) {
    let (signed, sub16) = (kind.signed(), kind.sub_elems() == 16);
    let halves = if sub16 { 2 } else { 1 };
    for h in 0..halves {
        let half = if sub16 { h } else { j % 2 };
        let sc32 = if half == 0 {
            _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(scp))
        } else {
            _mm512_srai_epi32::<16>(scp)
        };
        // Two sums per row, even and odd chunks (as in `block_pair`).
        let mut bd = [[_mm512_setzero_si512(); 2]; R];
        for c in h * 8 / halves..(h + 1) * 8 / halves {
            let wv = if signed { _mm512_xor_si512(u[c], _mm512_set1_epi8(-128)) } else { u[c] };
            for x in 0..R {
                bd[x][c & 1] = _mm512_dpbusd_epi32(bd[x][c & 1], wv, bcast(a[x], b * 8 + c));
            }
        }
        for x in 0..R {
            let mut bd = _mm512_add_epi32(bd[x][0], bd[x][1]);
            if signed {
                bd = _mm512_sub_epi32(bd, _mm512_set1_epi32(bsums[x] << 7));
            }
            isum[x] = _mm512_add_epi32(isum[x], _mm512_mullo_epi32(bd, sc32));
        }
    }
}

/// Groups `g` and `g+1` against every activation row, into `out0` and `out1`
/// (`t·8` each); `unpacked` is scratch for a prefill.
#[inline(always)]
unsafe fn pair<const VNNI: bool>(
    m: &PackedMatrix,
    g: usize,
    acts: &QuantActs,
    (out0, out1): (&mut [f32], &mut [f32]),
    unpacked: &mut Vec<u8>,
) {
    // Unpacked in registers as the kernel goes, or the pair once beforehand.
    let fused = m.unpacks_in_registers(acts.t);
    if !fused {
        unpacked.resize(m.k * 2 * GROUP, 0);
        unpack_pair(m, g, unpacked);
    }
    let w = if fused { &[][..] } else { &unpacked[..] };
    let (sup, mut i0) = (m.kind.is_super(), 0);
    while i0 < acts.t {
        let r = (acts.t - i0).min(TILE);
        let o = (&mut *out0, &mut *out1);
        match (sup, fused, r) {
            (false, true, 4) => block_pair::<4, true, VNNI>(m, g, w, acts, i0, o),
            (false, true, 3) => block_pair::<3, true, VNNI>(m, g, w, acts, i0, o),
            (false, true, 2) => block_pair::<2, true, VNNI>(m, g, w, acts, i0, o),
            (false, true, _) => block_pair::<1, true, VNNI>(m, g, w, acts, i0, o),
            (false, false, 4) => block_pair::<4, false, VNNI>(m, g, w, acts, i0, o),
            (false, false, 3) => block_pair::<3, false, VNNI>(m, g, w, acts, i0, o),
            (false, false, 2) => block_pair::<2, false, VNNI>(m, g, w, acts, i0, o),
            (false, false, _) => block_pair::<1, false, VNNI>(m, g, w, acts, i0, o),
            (true, true, 4) => super_pair::<4, true, VNNI>(m, g, w, acts, i0, o),
            (true, true, 3) => super_pair::<3, true, VNNI>(m, g, w, acts, i0, o),
            (true, true, 2) => super_pair::<2, true, VNNI>(m, g, w, acts, i0, o),
            (true, true, _) => super_pair::<1, true, VNNI>(m, g, w, acts, i0, o),
            (true, false, 4) => super_pair::<4, false, VNNI>(m, g, w, acts, i0, o),
            (true, false, 3) => super_pair::<3, false, VNNI>(m, g, w, acts, i0, o),
            (true, false, 2) => super_pair::<2, false, VNNI>(m, g, w, acts, i0, o),
            (true, false, _) => super_pair::<1, false, VNNI>(m, g, w, acts, i0, o),
        }
        i0 += r;
    }
}
