//! Exhaustive codec tests over every format (`MxFormat::ALL`: a new format needs no edit here).
//!
//! * the full decode table of every code against hand-written value lists (FP4, FP6: NUMERICS.md
//!   1.1) and against the independent bit-definition oracle (`tests/oracle`, all formats);
//! * all 256 E8M0 bytes, and dequantization of every code at every scale byte;
//! * `encode(decode(c)) == c` for every canonical code, at scale 127 and at other scales;
//! * a brute-force nearest-value oracle for element encoding (ties to the even code LSB,
//!   saturation, sign of zero) on edge and random inputs, and for the scale byte of every mode
//!   on edge and random amax values, and for whole blocks.

mod oracle;

use mxmoe::format::{
    decode_elem_f64, dequantize_block, e8m0_to_f32, encode_elem, pack_codes, quantize_block,
    scale_byte, MxFormat, MxTensor, ScaleMode, BLOCK,
};
use oracle::{Gen, Kind};

fn same_f64(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}
fn same_f32(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// Every format's hand-written oracle row agrees with its `spec()` row (catches a wrong bias,
/// emax or max in the format table).
#[test]
fn hand_rows_match_spec() {
    for fmt in MxFormat::ALL {
        let Some(p) = oracle::hand_params(fmt) else {
            // Not a silent pass: the generic tests below still run for it, against `spec()`.
            eprintln!("NOTE: {fmt} has no hand-written oracle row; generic tests use spec()");
            continue;
        };
        let s = fmt.spec();
        assert_eq!(s.code_bits, p.code_bits, "{fmt}");
        assert_eq!(s.emax_elem, p.emax_elem, "{fmt}");
        assert_eq!(s.max_normal, p.max, "{fmt}");
        assert_eq!(s.sign_bit(), 1 << (p.code_bits - 1), "{fmt}");
        match p.kind {
            Kind::Float {
                ebits, mbits, bias, ..
            } => {
                assert_eq!((s.ebits, s.mbits, s.bias), (ebits, mbits, bias), "{fmt}");
            }
            Kind::Int8 => assert_eq!(s.kind, mxmoe::format::ElemKind::Int, "{fmt}"),
        }
        // The max is the largest finite value of the oracle's grid, with code max_code.
        let g = oracle::grid(&p);
        assert_eq!(*g.last().unwrap(), (p.max, s.max_code as u8), "{fmt}");
    }
}

/// NUMERICS.md 1.1, copied: the positive value lists of FP4 and FP6 (codes 0 .. 2^(e+m) − 1).
fn hand_table(fmt: MxFormat) -> Option<Vec<f64>> {
    let fp4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let e2m3 = [
        0.0,
        1.0 / 8.0,
        1.0 / 4.0,
        3.0 / 8.0,
        1.0 / 2.0,
        5.0 / 8.0,
        3.0 / 4.0,
        7.0 / 8.0,
        1.0,
        9.0 / 8.0,
        5.0 / 4.0,
        11.0 / 8.0,
        3.0 / 2.0,
        13.0 / 8.0,
        7.0 / 4.0,
        15.0 / 8.0,
        2.0,
        9.0 / 4.0,
        5.0 / 2.0,
        11.0 / 4.0,
        3.0,
        13.0 / 4.0,
        7.0 / 2.0,
        15.0 / 4.0,
        4.0,
        9.0 / 2.0,
        5.0,
        11.0 / 2.0,
        6.0,
        13.0 / 2.0,
        7.0,
        15.0 / 2.0,
    ];
    let e3m2 = [
        0.0,
        1.0 / 16.0,
        1.0 / 8.0,
        3.0 / 16.0,
        1.0 / 4.0,
        5.0 / 16.0,
        3.0 / 8.0,
        7.0 / 16.0,
        1.0 / 2.0,
        5.0 / 8.0,
        3.0 / 4.0,
        7.0 / 8.0,
        1.0,
        5.0 / 4.0,
        3.0 / 2.0,
        7.0 / 4.0,
        2.0,
        5.0 / 2.0,
        3.0,
        7.0 / 2.0,
        4.0,
        5.0,
        6.0,
        7.0,
        8.0,
        10.0,
        12.0,
        14.0,
        16.0,
        20.0,
        24.0,
        28.0,
    ];
    match fmt.name() {
        "mxfp4" => Some(fp4.to_vec()),
        "mxfp6_e2m3" => Some(e2m3.to_vec()),
        "mxfp6_e3m2" => Some(e3m2.to_vec()),
        _ => None,
    }
}

/// The full decode table of every format: hand lists for FP4/FP6 (negative half = negated,
/// −0 included), the bit-definition oracle for all, and named FP8/INT8 spot values.
#[test]
fn decode_tables() {
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        let n = 1u32 << p.code_bits;
        if let Some(pos) = hand_table(fmt) {
            let half = n as usize / 2;
            assert_eq!(pos.len(), half);
            for c in 0..n as usize {
                let want = if c < half { pos[c] } else { -pos[c - half] };
                assert!(
                    same_f64(decode_elem_f64(fmt, c as u8), want),
                    "{fmt} {c:#x}"
                );
                assert!(
                    same_f64(oracle::decode(&p, c as u8), want),
                    "oracle {fmt} {c:#x}"
                );
            }
        }
        for c in 0..n {
            // MXINT8 0x80 (−128): never produced, and its decode is not pinned by the contract.
            if matches!(p.kind, Kind::Int8) && c == 0x80 {
                continue;
            }
            let got = decode_elem_f64(fmt, c as u8);
            let want = oracle::decode(&p, c as u8);
            assert!(
                same_f64(got, want),
                "{fmt} code {c:#x}: {got} vs oracle {want}"
            );
        }
    }
    // Spot values from the NUMERICS.md section 1 table.
    let spots: [(MxFormat, u8, f64); 16] = [
        (MxFormat::Fp8E4M3, 0x7E, 448.0),
        (MxFormat::Fp8E4M3, 0xFE, -448.0),
        (MxFormat::Fp8E4M3, 0x08, 1.0 / 64.0), // min normal 2^-6
        (MxFormat::Fp8E4M3, 0x07, 0.875 / 64.0), // max subnormal
        (MxFormat::Fp8E4M3, 0x01, 1.0 / 512.0), // min subnormal 2^-9
        (MxFormat::Fp8E4M3, 0x80, -0.0),
        (MxFormat::Fp8E5M2, 0x7B, 57344.0),
        (MxFormat::Fp8E5M2, 0x04, 1.0 / 16384.0), // min normal 2^-14
        (MxFormat::Fp8E5M2, 0x03, 0.75 / 16384.0), // max subnormal
        (MxFormat::Fp8E5M2, 0x01, 1.0 / 65536.0), // min subnormal 2^-16
        (MxFormat::Fp8E5M2, 0x7C, f64::INFINITY),
        (MxFormat::Fp8E5M2, 0xFC, f64::NEG_INFINITY),
        (MxFormat::Int8, 0x7F, 127.0 / 64.0),
        (MxFormat::Int8, 0x81, -127.0 / 64.0),
        (MxFormat::Int8, 0x01, 1.0 / 64.0),
        (MxFormat::Int8, 0xFF, -1.0 / 64.0),
    ];
    for (fmt, c, want) in spots {
        assert!(same_f64(decode_elem_f64(fmt, c), want), "{fmt} {c:#x}");
    }
    for c in [0x7Fu8, 0xFF] {
        assert!(
            decode_elem_f64(MxFormat::Fp8E4M3, c).is_nan(),
            "E4M3 {c:#x} is NaN"
        );
    }
    for c in [0x7Du8, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF] {
        assert!(
            decode_elem_f64(MxFormat::Fp8E5M2, c).is_nan(),
            "E5M2 {c:#x} is NaN"
        );
    }
}

/// All 256 E8M0 bytes: 2^(b − 127) (byte 0 = the fp32 subnormal 2^-127), 255 = NaN.
#[test]
fn e8m0_all_bytes() {
    for b in 0..=255u8 {
        let got = e8m0_to_f32(b);
        if b == 255 {
            assert!(got.is_nan());
            continue;
        }
        let want = oracle::pow2(b as i32 - 127) as f32; // exact: 2^-127 .. 2^127 fit in f32
        assert_eq!(got.to_bits(), want.to_bits(), "byte {b}");
        assert!(got > 0.0, "byte {b} must not decode to zero");
    }
}

/// Dequantization of every code at every scale byte equals the exact product
/// `decode(c) · 2^(b−127)` rounded once to f32 (exact whenever representable, including fp32
/// subnormals; IEEE overflow to ±Inf otherwise), NaN for byte 255 — through both
/// `dequantize_block` and `MxTensor::dequantize` (its table path).
#[test]
fn dequant_every_code_every_scale() {
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        let n = 1usize << p.code_bits;
        // One row of `n` codes padded to whole blocks, repeated for every scale byte.
        let k = n.div_ceil(BLOCK) * BLOCK;
        let mut codes = vec![0u8; 256 * k];
        let mut scales = vec![0u8; 256 * (k / BLOCK)];
        for b in 0..256 {
            for c in 0..n {
                codes[b * k + c] = c as u8;
            }
            scales[b * (k / BLOCK)..(b + 1) * (k / BLOCK)].fill(b as u8);
        }
        let mut data = vec![0u8; fmt.packed_len(codes.len())];
        pack_codes(fmt, &codes, &mut data);
        let t = MxTensor::new(fmt, vec![256, k], data, scales).unwrap();
        let td = t.dequantize();
        for b in 0..=255u8 {
            let mut out = vec![0f32; k];
            for (o, cb) in out
                .chunks_exact_mut(BLOCK)
                .zip(codes[b as usize * k..].chunks_exact(BLOCK))
            {
                dequantize_block(fmt, cb, b, o);
            }
            for c in 0..n {
                if matches!(p.kind, Kind::Int8) && c == 0x80 {
                    continue;
                }
                let want = if b == 255 {
                    f32::NAN
                } else {
                    (oracle::decode(&p, c as u8) * oracle::pow2(b as i32 - 127)) as f32
                };
                let got = out[c];
                assert!(
                    same_f32(got, want),
                    "{fmt} code {c:#x} byte {b}: {got:e} vs {want:e}"
                );
                let got_t = td[b as usize * k + c];
                assert!(
                    same_f32(got_t, want),
                    "MxTensor {fmt} code {c:#x} byte {b}: {got_t:e} vs {want:e}"
                );
            }
        }
    }
}

/// `encode(decode(c)) == c` for every canonical code (−0 keeps its sign; MXINT8 has no −0 and
/// no −128; E4M3 NaN and E5M2 Inf/NaN codes excluded), at scale 127 through `encode_elem` and
/// through a whole block (Floor, with ±max in the block to pin scale 127), and at other scales
/// wherever `decode(c) · 2^s` is an f32.
#[test]
fn encode_decode_roundtrip() {
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        let canon: Vec<u8> = (0..(1u32 << p.code_bits))
            .map(|c| c as u8)
            .filter(|&c| oracle::is_canonical(&p, c))
            .filter(|&c| !(matches!(p.kind, Kind::Int8) && c == 0x80))
            .collect();
        for &c in &canon {
            let v = oracle::decode(&p, c) as f32;
            assert_eq!(
                encode_elem(fmt, v.to_bits(), 0),
                c,
                "{fmt} code {c:#x} ({v})"
            );
        }
        // Blocks of 31 codes plus the max (scale 127 under Floor for every format).
        for chunk in canon.chunks(BLOCK - 1) {
            let mut x = [0f32; BLOCK];
            x[0] = p.max as f32;
            for (j, &c) in chunk.iter().enumerate() {
                x[j + 1] = oracle::decode(&p, c) as f32;
            }
            let mut codes = [0u8; BLOCK];
            let s = quantize_block(fmt, ScaleMode::Floor, &x, &mut codes);
            assert_eq!(s, 127, "{fmt}");
            assert_eq!(&codes[1..=chunk.len()], chunk, "{fmt} block roundtrip");
        }
        // Other scales.
        for s in [-127, -126, -100, -30, -1, 1, 30, 100, 126, 127] {
            for &c in &canon {
                let v = oracle::decode(&p, c) * oracle::pow2(s);
                let vf = v as f32;
                if !vf.is_finite() || vf as f64 != v {
                    continue; // not an f32: cannot be an input
                }
                assert_eq!(
                    encode_elem(fmt, vf.to_bits(), s),
                    c,
                    "{fmt} code {c:#x} scale 2^{s}"
                );
            }
        }
    }
}

/// Edge inputs for element encoding at scale exponent `s`: every grid point, every midpoint
/// between neighbours (exact ties), each ± 1 and 2 ulps, values beyond the max, tiny values.
fn edge_inputs(p: &oracle::Params, s: i32) -> Vec<f32> {
    let g = oracle::grid(p);
    let mut pts: Vec<f64> = g.iter().map(|&(v, _)| v).collect();
    for w in g.windows(2) {
        pts.push((w[0].0 + w[1].0) / 2.0);
    }
    pts.extend([
        p.max * 1.0001,
        p.max * 1.5,
        p.max * 2.0,
        p.max * 1e6,
        g[1].0 / 4.0,
        g[1].0 / 3.0,
    ]);
    let mut out = Vec::new();
    for v in pts {
        let x = (v * oracle::pow2(s)) as f32;
        if !x.is_finite() {
            continue;
        }
        for d in -2i32..=2 {
            let b = x.to_bits() as i64 + d as i64;
            if !(0..0x7F80_0000).contains(&b) {
                continue;
            }
            let y = f32::from_bits(b as u32);
            out.push(y);
            out.push(-y);
        }
    }
    out
}

/// Brute-force nearest-value oracle for element encoding: edge inputs and random f32s at many
/// scale exponents. Catches ties-away or ties-toward-zero rounding, lost sticky bits, missing
/// saturation, flushed subnormals and a lost sign of zero.
#[test]
fn encode_matches_nearest_oracle() {
    let mut gen = Gen::new(7);
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        let g = oracle::grid(&p);
        for s in [-127, -126, -120, -60, -9, -1, 0, 1, 2, 9, 60, 120, 127] {
            let mut xs = edge_inputs(&p, s);
            // Random values near this scale's range, and random bit patterns.
            for _ in 0..3000 {
                let mag = p.max * oracle::pow2(s) * gen.unit() * 1.2;
                xs.push(if gen.below(2) == 0 {
                    mag as f32
                } else {
                    -mag as f32
                });
                xs.push(gen.any_finite_f32());
            }
            for x in xs {
                if !x.is_finite() {
                    continue;
                }
                let want = oracle::nearest_code(&p, &g, x, s);
                let got = encode_elem(fmt, x.to_bits(), s);
                assert_eq!(
                    got,
                    want,
                    "{fmt}: encode({x:e} = {:#010x}, scale 2^{s}) = {got:#x}, oracle {want:#x}",
                    x.to_bits()
                );
            }
        }
    }
}

/// Edge amax values for the scale rules: powers of two, the max, the Even thresholds, and
/// their neighbours, across the whole fp32 range (subnormals included), plus random values.
fn amax_inputs(p: &oracle::Params, gen: &mut Gen) -> Vec<f32> {
    let even_thr = 2.0 - oracle::pow2(-(p.even_mbits as i32) - 1);
    let bases = [
        1.0,
        1.5,
        1.75,
        even_thr,
        p.max,
        p.max / 2.0,
        1.0 + 1.0 / 64.0,
    ];
    let mut out = vec![f32::MIN_POSITIVE, f32::MAX, f32::from_bits(1), 1e-38, 1e38];
    for k in -160..=130 {
        for b in bases {
            let x = (b * oracle::pow2(k - p.emax_elem)) as f32;
            if x == 0.0 || !x.is_finite() {
                continue;
            }
            for d in -3i64..=3 {
                let bits = x.to_bits() as i64 + d;
                if (1..0x7F80_0000).contains(&bits) {
                    out.push(f32::from_bits(bits as u32));
                }
            }
        }
    }
    for _ in 0..5000 {
        out.push(gen.any_finite_f32().abs());
    }
    out.retain(|v| *v != 0.0);
    out
}

/// The scale byte of every mode against the independent oracle (exact powers-of-two compares
/// for Floor/Ceil/RCeil, the contract's literal bit formula for Even).
#[test]
fn scale_byte_matches_oracle() {
    let mut gen = Gen::new(11);
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        for a in amax_inputs(&p, &mut gen) {
            for mode in ScaleMode::ALL {
                let got = scale_byte(fmt, mode, a.to_bits());
                match oracle::scale_byte(&p, mode, a) {
                    Some(want) => {
                        assert_eq!(got, want, "{fmt} {mode} amax {a:e} ({:#010x})", a.to_bits())
                    }
                    None => assert!(got <= 1, "{fmt} {mode} amax {a:e}: {got}"),
                }
                // The sign of amax is ignored.
                assert_eq!(scale_byte(fmt, mode, (-a).to_bits()), got);
            }
        }
    }
}

/// The Even rule's literal bit formula means "round amax half-up at the element mantissa width,
/// then floor" (NUMERICS.md 5.2, in words) for every normal amax: checks the oracle's reading
/// of the contract, and the code through it.
#[test]
fn even_rule_in_words() {
    let mut gen = Gen::new(13);
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        for a in amax_inputs(&p, &mut gen) {
            if !a.is_normal() {
                continue;
            }
            let fl = oracle::floor_log2(a as f64);
            let mant = a as f64 * oracle::pow2(-fl); // [1, 2)
            let unit = oracle::pow2(-(p.even_mbits as i32));
            let rounded = ((mant / unit) + 0.5).floor() * unit; // half-up
            let e = if rounded >= 2.0 { fl + 1 } else { fl };
            let want = ((e - p.emax_elem).clamp(-127, 127) + 127) as u8;
            assert_eq!(
                scale_byte(fmt, ScaleMode::Even, a.to_bits()),
                want,
                "{fmt} amax {a:e}"
            );
        }
    }
}

/// Whole blocks: scale byte and all 32 codes against the oracle, for random blocks with
/// assorted magnitudes, exact ties and values around the saturation edge.
#[test]
fn blocks_match_oracle() {
    let mut gen = Gen::new(17);
    for fmt in MxFormat::ALL {
        let p = oracle::params(fmt);
        let g = oracle::grid(&p);
        for mode in ScaleMode::ALL {
            for it in 0..1500 {
                let e = gen.below(60) as i32 - 30;
                let mut x = [0f32; BLOCK];
                for v in x.iter_mut() {
                    *v = match gen.below(5) {
                        0 => 0.0,
                        // Exact grid midpoints (ties) at scale 2^e.
                        1 => {
                            let i = gen.below(g.len() as u64 - 1) as usize;
                            ((g[i].0 + g[i + 1].0) / 2.0 * oracle::pow2(e)) as f32
                        }
                        2 => (gen.unit() * p.max * 1.3 * oracle::pow2(e)) as f32,
                        3 => (gen.unit() * oracle::pow2(e - 6)) as f32,
                        _ => ((gen.unit() - 0.5) * 3.0 * oracle::pow2(e)) as f32,
                    };
                    if gen.below(2) == 0 {
                        *v = -*v;
                    }
                }
                if it % 50 == 0 {
                    x[gen.below(32) as usize] = gen.any_finite_f32();
                }
                let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                let mut codes = [0u8; BLOCK];
                let s = quantize_block(fmt, mode, &x, &mut codes);
                match oracle::scale_byte(&p, mode, amax) {
                    Some(want) => assert_eq!(s, want, "{fmt} {mode} block amax {amax:e}"),
                    None => assert!(s <= 1),
                }
                for (j, (&c, &v)) in codes.iter().zip(&x).enumerate() {
                    let want = oracle::nearest_code(&p, &g, v, s as i32 - 127);
                    assert_eq!(c, want, "{fmt} {mode} elem {j} = {v:e}, scale {s}");
                }
            }
        }
    }
}
