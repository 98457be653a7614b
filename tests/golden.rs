//! Golden vectors G1–G17 and G19 of `docs/NUMERICS.md` section 12 (plus G18 and the 6.1
//! worked scale table), written out **by hand** from the contract text.
//!
//! Every expected code, scale byte, dequantized value and packed byte below is copied from (or
//! derived by hand from the rules of) NUMERICS.md; none is produced by `mxmoe::format`. Each test
//! names the contract clause it pins, so a failure says which rule broke.
//!
//! Over 600 lines: the golden vectors are written out by hand, value by value, on purpose.

use mxmoe::format::{
    decode_elem_f64, dequantize_block, e8m0_to_f32, pack_codes, qdq_block, quantize_block,
    scale_byte, unpack_codes, MxFormat, MxTensor, ScaleMode, BLOCK,
};
use mxmoe::moe::reference::swiglu_oai;
use mxmoe::moe::{route, RouterConfig, Scoring};

use MxFormat::*;
use ScaleMode::*;

/// Pad the listed elements of a block with +0.0 (NUMERICS.md 12: "elements not listed are 0.0").
fn block(xs: &[f32]) -> [f32; BLOCK] {
    let mut b = [0f32; BLOCK];
    b[..xs.len()].copy_from_slice(xs);
    b
}

/// Quantize a (padded) block; return the scale byte and all 32 codes.
fn quant(fmt: MxFormat, mode: ScaleMode, xs: &[f32]) -> (u8, [u8; BLOCK]) {
    let mut codes = [0u8; BLOCK];
    let s = quantize_block(fmt, mode, &block(xs), &mut codes);
    (s, codes)
}

/// Assert the scale byte, the listed codes, that the padding codes are +0, and (when given) the
/// dequantized values, bit for bit (sign of zero included), through `dequantize_block`,
/// `qdq_block` and `MxTensor::{quantize, dequantize, codes}`.
fn check(
    what: &str,
    fmt: MxFormat,
    mode: ScaleMode,
    xs: &[f32],
    want_scale: u8,
    want_codes: &[u8],
    want_deq: Option<&[f32]>,
) {
    let (s, codes) = quant(fmt, mode, xs);
    assert_eq!(s, want_scale, "{what}: {fmt} {mode}: scale byte");
    assert_eq!(
        &codes[..want_codes.len()],
        want_codes,
        "{what}: {fmt} {mode}: codes (scale {s})"
    );
    // Padding zeros (+0.0) encode to code 0 in every format.
    assert!(
        codes[xs.len()..].iter().all(|&c| c == 0),
        "{what}: {fmt} {mode}: padding codes {:?}",
        &codes[xs.len()..]
    );
    // The tensor path agrees with the block path.
    let t = MxTensor::quantize(fmt, mode, &block(xs), &[1, BLOCK]).unwrap();
    assert_eq!(
        t.scales,
        vec![want_scale],
        "{what}: {fmt} {mode}: MxTensor scale"
    );
    assert_eq!(
        &t.codes()[..want_codes.len()],
        want_codes,
        "{what}: MxTensor codes"
    );
    if let Some(want) = want_deq {
        let mut out = [0f32; BLOCK];
        dequantize_block(fmt, &codes, s, &mut out);
        let mut q = [0f32; BLOCK];
        qdq_block(fmt, mode, &block(xs), &mut q);
        let td = t.dequantize();
        for (j, &w) in want.iter().enumerate() {
            assert_eq!(
                out[j].to_bits(),
                w.to_bits(),
                "{what}: {fmt} {mode}: dequant[{j}] = {} want {w}",
                out[j]
            );
            assert_eq!(q[j].to_bits(), w.to_bits(), "{what}: qdq[{j}]");
            assert_eq!(
                td[j].to_bits(),
                w.to_bits(),
                "{what}: MxTensor dequant[{j}]"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// G1–G3: decoding
// ---------------------------------------------------------------------------------------------

/// G1: FP4 E2M1 decode of all 16 codes; catches a wrong sign bit or table.
#[test]
fn g1_fp4_decode() {
    let want: [f64; 16] = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let codes: Vec<u8> = (0..16).collect();
    let mut out = [0f32; 16];
    dequantize_block(Fp4E2M1, &codes, 127, &mut out);
    for c in 0..16u8 {
        let v = decode_elem_f64(Fp4E2M1, c);
        assert_eq!(v.to_bits(), want[c as usize].to_bits(), "code {c:#x}: {v}");
        assert_eq!(
            out[c as usize].to_bits(),
            (want[c as usize] as f32).to_bits(),
            "dequant code {c:#x} at scale 127"
        );
    }
}

/// G2: FP6 decode spot checks (E2M3 and E3M2).
#[test]
fn g2_fp6_decode() {
    let e2m3: [(u8, f64); 6] = [
        (0x01, 1.0 / 8.0),
        (0x07, 7.0 / 8.0),
        (0x08, 1.0),
        (0x1F, 7.5),
        (0x21, -1.0 / 8.0),
        (0x3F, -7.5),
    ];
    let e3m2: [(u8, f64); 6] = [
        (0x01, 1.0 / 16.0),
        (0x07, 7.0 / 16.0),
        (0x08, 0.5),
        (0x1F, 28.0),
        (0x21, -1.0 / 16.0),
        (0x3F, -28.0),
    ];
    for (c, v) in e2m3 {
        assert_eq!(decode_elem_f64(Fp6E2M3, c), v, "E2M3 {c:#x}");
    }
    for (c, v) in e3m2 {
        assert_eq!(decode_elem_f64(Fp6E3M2, c), v, "E3M2 {c:#x}");
    }
}

/// G3: E8M0 decode, including byte 0 = 2^-127 (an fp32 subnormal, not zero) and 255 = NaN.
#[test]
fn g3_e8m0_decode() {
    let want: [(u8, u32); 6] = [
        (0, 0x0040_0000),
        (1, 0x0080_0000),
        (126, 0x3F00_0000), // 0.5
        (127, 0x3F80_0000), // 1.0
        (128, 0x4000_0000), // 2.0
        (254, 0x7F00_0000), // 2^127
    ];
    for (b, bits) in want {
        assert_eq!(e8m0_to_f32(b).to_bits(), bits, "byte {b}");
    }
    assert_eq!(e8m0_to_f32(126), 0.5);
    assert_eq!(e8m0_to_f32(128), 2.0);
    assert!(e8m0_to_f32(255).is_nan());
    assert_ne!(e8m0_to_f32(0), 0.0, "byte 0 must not decode to zero");
}

// ---------------------------------------------------------------------------------------------
// G4–G13: quantization
// ---------------------------------------------------------------------------------------------

/// G4: an all-zero block has scale 0 and code 0 under every mode (and every format); −0.0
/// inputs keep the sign bit (FP4 0x8), except MXINT8 which has no −0.
#[test]
fn g4_zero_block() {
    // Hand-written: the −0 code of each format (its sign bit), MXINT8 none.
    let neg_zero = |f: MxFormat| -> u8 {
        match f {
            Fp4E2M1 => 0x8,
            Fp6E2M3 | Fp6E3M2 => 0x20,
            Fp8E4M3 | Fp8E5M2 => 0x80,
            Int8 => 0x00,
        }
    };
    for fmt in MxFormat::ALL {
        for mode in ScaleMode::ALL {
            let (s, codes) = quant(fmt, mode, &[]);
            assert_eq!(s, 0, "{fmt} {mode}: zero block scale");
            assert!(
                codes.iter().all(|&c| c == 0),
                "{fmt} {mode}: zero block codes"
            );
            let (s, codes) = quant(fmt, mode, &[-0.0; BLOCK]);
            assert_eq!(s, 0, "{fmt} {mode}: −0 block scale");
            assert!(
                codes.iter().all(|&c| c == neg_zero(fmt)),
                "{fmt} {mode}: −0 block codes {codes:?}"
            );
            let mut out = [1f32; BLOCK];
            qdq_block(fmt, mode, &[-0.0; BLOCK], &mut out);
            for v in out {
                assert_eq!(v, 0.0);
                assert_eq!(
                    v.is_sign_negative(),
                    fmt != Int8,
                    "{fmt}: sign of zero after QDQ"
                );
            }
        }
    }
    assert_eq!(quant(Fp4E2M1, Even, &[-0.0]).1[0], 0x8);
}

/// G5: FP4 round-to-nearest-even at scale 127 (Floor/Even/RCeil), and Ceil (scale 128).
/// Catches ties-away rounding (MSMX/Quark Triton), ggml's ties-toward-zero, the triton_kernels
/// lost-sticky-bit bug (0.25000003 must give 0x1) and a lost sign of zero.
#[test]
fn g5_fp4_rounding() {
    let x: [f32; 20] = [
        5.0,
        0.25,
        0.75,
        1.25,
        1.75,
        2.5,
        3.5,
        -0.25,
        -0.75,
        -1.25,
        -2.5,
        -3.5,
        0.1,
        -0.1,
        f32::from_bits(0x3E80_0001),
        f32::from_bits(0x3E80_0004),
        4.75,
        5.5,
        -0.0,
        0.0,
    ];
    let rne: [u8; 20] = [
        0x6, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x8, 0xA, 0xA, 0xC, 0xE, 0x0, 0x8, 0x1, 0x1, 0x6, 0x7,
        0x8, 0x0,
    ];
    let rne_deq: [f32; 20] = [
        4.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, -0.0, -1.0, -1.0, -2.0, -4.0, 0.0, -0.0, 0.5, 0.5, 4.0,
        6.0, -0.0, 0.0,
    ];
    for mode in [Floor, Even, RCeil] {
        check("G5", Fp4E2M1, mode, &x, 127, &rne, Some(&rne_deq));
    }
    let ceil: [u8; 20] = [
        0x4, 0x0, 0x1, 0x1, 0x2, 0x2, 0x4, 0x8, 0x9, 0x9, 0xA, 0xC, 0x0, 0x8, 0x0, 0x0, 0x4, 0x5,
        0x8, 0x0,
    ];
    // Hand-derived: decode(code) * 2.
    let ceil_deq: [f32; 20] = [
        4.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, -0.0, -1.0, -1.0, -2.0, -4.0, 0.0, -0.0, 0.0, 0.0, 4.0,
        6.0, -0.0, 0.0,
    ];
    check("G5 ceil", Fp4E2M1, Ceil, &x, 128, &ceil, Some(&ceil_deq));
}

/// G6 / section 6.1: the FP4 scale byte for each amax under Floor, Even, Ceil and RCeil,
/// including the exponent-bit vs log2 rows and the fp32-subnormal 1e-38 row.
#[test]
fn g6_fp4_scale_table() {
    // (amax, Floor, Even, Ceil, RCeil), copied from the 6.1 table.
    let rows: [(f32, [u8; 4]); 10] = [
        (0.75, [124, 124, 125, 124]),
        (3.0, [126, 126, 127, 126]),
        (5.0, [127, 127, 128, 127]),
        (6.0, [127, 127, 128, 127]),
        (6.5, [127, 127, 128, 128]),
        (7.0, [127, 128, 128, 128]),
        (8.0, [128, 128, 128, 128]),
        (f32::from_bits(0x437F_FFFF), [132, 133, 133, 133]),
        (f32::from_bits(0x4380_0001), [133, 133, 134, 133]),
        (1e-38, [0, 0, 0, 0]),
    ];
    assert!(
        !1e-38f32.is_normal(),
        "the last row must be an fp32 subnormal"
    );
    for (amax, want) in rows {
        for (mode, &w) in [Floor, Even, Ceil, RCeil].iter().zip(&want) {
            assert_eq!(
                scale_byte(Fp4E2M1, *mode, amax.to_bits()),
                w,
                "scale_byte(amax {amax:e}, {mode})"
            );
            // The same through a block, with either sign on the amax element.
            assert_eq!(
                quant(Fp4E2M1, *mode, &[amax]).0,
                w,
                "block [{amax:e}] {mode}"
            );
            assert_eq!(
                quant(Fp4E2M1, *mode, &[0.5 * amax, -amax]).0,
                w,
                "block −amax {mode}"
            );
        }
    }
}

/// G7: amax = 7 saturates under Floor only; Even/Ceil/RCeil move to scale 128.
/// 3.25/2 = 1.625 is not a tie.
#[test]
fn g7_amax7() {
    let x = [7.0, -6.5, 3.25, 1.0];
    check(
        "G7",
        Fp4E2M1,
        Floor,
        &x,
        127,
        &[0x7, 0xF, 0x5, 0x2],
        Some(&[6.0, -6.0, 3.0, 1.0]),
    );
    for mode in [Even, Ceil, RCeil] {
        check(
            "G7",
            Fp4E2M1,
            mode,
            &x,
            128,
            &[0x6, 0xD, 0x3, 0x1],
            Some(&[8.0, -6.0, 3.0, 1.0]),
        );
    }
}

/// G8: Floor from the exact exponent bits (255.99998 -> 2^7, scale 132), not `floor(log2f)`.
/// Even/RCeil (and Ceil, by 6.1) give 133.
#[test]
fn g8_log2_rounding() {
    let x = [f32::from_bits(0x437F_FFFF), 100.0, -37.0, 3.0];
    check(
        "G8",
        Fp4E2M1,
        Floor,
        &x,
        132,
        &[0x7, 0x5, 0xA, 0x0],
        Some(&[192.0, 96.0, -32.0, 0.0]),
    );
    for mode in [Even, RCeil, Ceil] {
        check(
            "G8",
            Fp4E2M1,
            mode,
            &x,
            133,
            &[0x6, 0x3, 0x9, 0x0],
            Some(&[256.0, 96.0, -32.0, 0.0]),
        );
    }
}

/// G9: AO Ceil from exponent bits: 256.00003 -> scale 134 (not Quark's `ceil(log2f)` 133).
#[test]
fn g9_ceil_exponent_bits() {
    let x = [f32::from_bits(0x4380_0001), 100.0];
    check(
        "G9",
        Fp4E2M1,
        Ceil,
        &x,
        134,
        &[0x4, 0x2],
        Some(&[256.0, 128.0]),
    );
}

/// G10: MXFP8 E4M3, the microxcaling issue #4 block (all 32 values from the issue). Floor/Even
/// saturate 957/2 = 478.5 to 448; Ceil/RCeil do not.
#[test]
// The values are transcribed digit for digit from the issue (more digits than f32 holds).
#[allow(clippy::excessive_precision)]
fn g10_e4m3_microxcaling_issue4() {
    let x: [f32; 32] = [
        957.0000, 957.0000, 902.4000, 960.0000, 832.0000, 291.7882, -124.8256, 783.5460, 927.3255,
        -233.1170, 583.4501, 57.7898, 136.0891, 851.1933, -857.9279, -825.7414, -959.5632,
        665.2397, 556.3135, 740.0243, 957.2367, 598.3171, -77.0413, 561.0583, -763.4512, 279.8420,
        -713.2934, 889.3378, 43.6966, -170.6761, -470.8888, 548.4674,
    ];
    for mode in [Floor, Even] {
        let (s, codes) = quant(Fp8E4M3, mode, &x);
        assert_eq!(s, 128, "{mode}");
        assert_eq!(&codes[..6], &[0x7E, 0x7E, 0x7E, 0x7E, 0x7D, 0x71], "{mode}");
        // Hand-derived: −959.5632/2 = −479.8 saturates to −448 (0xFE).
        assert_eq!(codes[16], 0xFE, "{mode}");
        let mut out = [0f32; BLOCK];
        dequantize_block(Fp8E4M3, &codes, s, &mut out);
        assert_eq!(
            &out[..6],
            &[896.0, 896.0, 896.0, 896.0, 832.0, 288.0],
            "{mode}"
        );
    }
    for mode in [Ceil, RCeil] {
        let (s, codes) = quant(Fp8E4M3, mode, &x);
        assert_eq!(s, 129, "{mode}");
        assert_eq!(&codes[..6], &[0x77, 0x77, 0x76, 0x77, 0x75, 0x69], "{mode}");
        // Hand-derived: −959.5632/4 = −239.89 -> −240 = −1.875·2^7 (0xF7).
        assert_eq!(codes[16], 0xF7, "{mode}");
        let mut out = [0f32; BLOCK];
        dequantize_block(Fp8E4M3, &codes, s, &mut out);
        assert_eq!(
            &out[..6],
            &[960.0, 960.0, 896.0, 960.0, 832.0, 288.0],
            "{mode}"
        );
    }
}

/// G11: FP6 E3M2 ties (RNE on the code LSB) and Even's bump at mantissa 1.875 (30 -> 32).
#[test]
fn g11_e3m2_ties() {
    let x = [
        16.0, 0.03125, 0.09375, 0.15625, 2.25, 9.0, 18.0, 30.0, -0.03125, -0.09375,
    ];
    check(
        "G11",
        Fp6E3M2,
        Floor,
        &x,
        127,
        &[0x1C, 0x00, 0x02, 0x02, 0x10, 0x18, 0x1C, 0x1F, 0x20, 0x22],
        Some(&[16.0, 0.0, 0.125, 0.125, 2.0, 8.0, 16.0, 28.0, -0.0, -0.125]),
    );
    for mode in [Even, Ceil, RCeil] {
        check(
            "G11",
            Fp6E3M2,
            mode,
            &x,
            128,
            &[0x18, 0x00, 0x01, 0x01, 0x0C, 0x14, 0x18, 0x1C, 0x20, 0x21],
            Some(&[16.0, 0.0, 0.125, 0.125, 2.0, 8.0, 16.0, 32.0, -0.0, -0.125]),
        );
    }
}

/// G12: FP6 E2M3 ties, Ceil's wasted binade (same dequant), and Even's bump at 1.9375 (7.75).
#[test]
fn g12_e2m3() {
    let x = [4.0, 0.0625, 0.1875, 7.25, 1.0625, 3.375, -0.0625, -5.25];
    let deq = [4.0, 0.0, 0.25, 7.0, 1.0, 3.5, -0.0, -5.0];
    for mode in [Floor, Even, RCeil] {
        check(
            "G12",
            Fp6E2M3,
            mode,
            &x,
            127,
            &[0x18, 0x00, 0x02, 0x1E, 0x08, 0x16, 0x20, 0x3A],
            Some(&deq),
        );
    }
    check(
        "G12",
        Fp6E2M3,
        Ceil,
        &x,
        128,
        &[0x10, 0x00, 0x01, 0x16, 0x04, 0x0E, 0x20, 0x32],
        Some(&deq),
    );
    let bump = [7.75, 7.25, 1.0625];
    check(
        "G12 bump",
        Fp6E2M3,
        Floor,
        &bump,
        127,
        &[0x1F, 0x1E, 0x08],
        Some(&[7.5, 7.0, 1.0]),
    );
    for mode in [Even, RCeil] {
        check(
            "G12 bump",
            Fp6E2M3,
            mode,
            &bump,
            128,
            &[0x18, 0x16, 0x04],
            Some(&[8.0, 7.0, 1.0]),
        );
    }
}

/// G13: MXINT8 (Floor scale 127): value·64 rounded half-to-even, symmetric clamp at 127.
#[test]
fn g13_mxint8() {
    let x = [1.5, -1.0, 0.3, 2f32.powi(-7), -1.5 * 2f32.powi(-7), 1.99];
    let ints: [i8; 6] = [96, -64, 19, 0, -1, 127];
    let codes: Vec<u8> = ints.iter().map(|&n| n as u8).collect();
    let deq: Vec<f32> = ints.iter().map(|&n| n as f32 / 64.0).collect();
    check("G13", Int8, Floor, &x, 127, &codes, Some(&deq));
    // −128 is never produced: a block whose negative extreme overshoots clamps to −127.
    let (s, c) = quant(Int8, Floor, &[1.0, -1.999]);
    assert_eq!((s, c[1]), (127, (-127i8) as u8));
}

/// G14: a block holding NaN or ±Inf gets scale 0xFF, all codes 0, and decodes to NaN
/// everywhere, for every format and mode (NUMERICS.md 5.5).
#[test]
fn g14_special_blocks() {
    let specials = [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    for fmt in MxFormat::ALL {
        for mode in ScaleMode::ALL {
            for &sp in &specials {
                for pos in [0usize, 7, 31] {
                    let mut x = [0f32; BLOCK];
                    for (j, v) in x.iter_mut().enumerate() {
                        *v = (j as f32 - 11.0) * 0.37;
                    }
                    x[pos] = sp;
                    let mut codes = [0xAAu8; BLOCK];
                    let s = quantize_block(fmt, mode, &x, &mut codes);
                    assert_eq!(s, 0xFF, "{fmt} {mode} {sp} at {pos}");
                    assert!(
                        codes.iter().all(|&c| c == 0),
                        "{fmt} {mode} {sp}: codes {codes:?}"
                    );
                    let mut out = [0f32; BLOCK];
                    dequantize_block(fmt, &codes, s, &mut out);
                    assert!(out.iter().all(|v| v.is_nan()), "{fmt} {mode} {sp}: decode");
                    qdq_block(fmt, mode, &x, &mut out);
                    assert!(out.iter().all(|v| v.is_nan()), "{fmt} {mode} {sp}: qdq");
                    let t = MxTensor::quantize(fmt, mode, &x, &[1, BLOCK]).unwrap();
                    assert_eq!(t.scales, vec![0xFF]);
                    assert!(t.dequantize().iter().all(|v| v.is_nan()));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// G15–G17: packing and dequantization edges
// ---------------------------------------------------------------------------------------------

/// G15: FP4 linear packing: element 2i in the LOW nibble (not ggml's split order).
#[test]
fn g15_fp4_packing() {
    let mut codes = [0u8; BLOCK];
    for i in 0..16 {
        codes[i] = i as u8;
        codes[16 + i] = 15 - i as u8;
    }
    let want: [u8; 16] = [
        0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23,
        0x01,
    ];
    let mut packed = [0u8; 16];
    pack_codes(Fp4E2M1, &codes, &mut packed);
    assert_eq!(packed, want);
    let mut back = [0u8; BLOCK];
    unpack_codes(Fp4E2M1, &want, &mut back);
    assert_eq!(back, codes);
    // And through MxTensor: a block with exactly these codes at scale 127 (Floor: amax 6).
    let vals: [f64; 16] = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let x: Vec<f32> = codes.iter().map(|&c| vals[c as usize] as f32).collect();
    let t = MxTensor::quantize(Fp4E2M1, Floor, &x, &[1, BLOCK]).unwrap();
    assert_eq!(t.scales, vec![127]);
    assert_eq!(t.data, want.to_vec());
}

/// G16: FP6 packing (Quark `Pack_fp6`): `w = v0 | v1<<6 | v2<<12 | v3<<18`, little-endian.
#[test]
fn g16_fp6_packing() {
    let cases: [([u8; 4], [u8; 3]); 3] = [
        ([0x01, 0x22, 0x3F, 0x10], [0x81, 0xF8, 0x43]),
        ([0x3F, 0, 0, 0], [0x3F, 0x00, 0x00]),
        ([0, 0, 0, 0x3F], [0x00, 0x00, 0xFC]),
    ];
    for fmt in [Fp6E2M3, Fp6E3M2] {
        for (q, want) in cases {
            // A full block: the case in the first group of four, zeros elsewhere.
            let mut codes = [0u8; BLOCK];
            codes[..4].copy_from_slice(&q);
            let mut packed = [0u8; 24];
            pack_codes(fmt, &codes, &mut packed);
            assert_eq!(&packed[..3], &want, "{fmt} {q:x?}");
            assert!(packed[3..].iter().all(|&b| b == 0));
            // Also in the last group (byte offset 21).
            let mut codes2 = [0u8; BLOCK];
            codes2[28..].copy_from_slice(&q);
            pack_codes(fmt, &codes2, &mut packed);
            assert_eq!(&packed[21..], &want, "{fmt} {q:x?} last group");
            let mut back = [0u8; BLOCK];
            unpack_codes(fmt, &packed, &mut back);
            assert_eq!(back, codes2);
        }
    }
}

/// G17: dequantization at the scale edges: scale byte 0 is 2^-127 (results are exact, including
/// fp32 subnormals), byte 255 is NaN for every code, and fp16 outputs use IEEE conversion with
/// no scale clamp (32768 stays 32768; 1.5·2^-25 rounds to the fp16 subnormal 2^-24).
#[test]
fn g17_dequant_scale_edges() {
    let deq = |fmt: MxFormat, code: u8, byte: u8| -> (f32, f32) {
        let mut codes = [0u8; BLOCK];
        codes[0] = code;
        let mut out = [0f32; BLOCK];
        dequantize_block(fmt, &codes, byte, &mut out);
        let mut data = vec![0u8; fmt.packed_len(BLOCK)];
        pack_codes(fmt, &codes, &mut data);
        let t = MxTensor::new(fmt, vec![1, BLOCK], data, vec![byte]).unwrap();
        (out[0], t.dequantize()[0])
    };
    // 6 · 2^-127 = 1.5 · 2^-125: biased exponent 2, mantissa 0x400000.
    let (a, b) = deq(Fp4E2M1, 0x7, 0);
    assert_eq!((a.to_bits(), b.to_bits()), (0x0140_0000, 0x0140_0000));
    // 0.5 · 2^-127 = 2^-128: the fp32 subnormal 0x00200000.
    let (a, b) = deq(Fp4E2M1, 0x1, 0);
    assert_eq!((a.to_bits(), b.to_bits()), (0x0020_0000, 0x0020_0000));
    // Negative subnormal result keeps its sign.
    let (a, b) = deq(Fp4E2M1, 0x9, 0);
    assert_eq!((a.to_bits(), b.to_bits()), (0x8020_0000, 0x8020_0000));
    // Scale 255: NaN for every code (code 0 included), every format.
    for fmt in MxFormat::ALL {
        for code in [0u8, 1, fmt.spec().sign_bit() as u8] {
            let (a, b) = deq(fmt, code, 255);
            assert!(a.is_nan() && b.is_nan(), "{fmt} code {code:#x} scale 255");
        }
    }
    // fp16 outputs (IEEE RNE conversion of the exact fp32 value).
    let (a, b) = deq(Fp4E2M1, 0x1, 143);
    assert_eq!((a, b), (32768.0, 32768.0));
    assert_eq!(half::f16::from_f32(a).to_bits(), 0x7800, "32768 in fp16");
    let (a, b) = deq(Fp4E2M1, 0x7, 100);
    assert_eq!(a.to_bits(), (1.5f32 * 2f32.powi(-25)).to_bits());
    assert_eq!(b.to_bits(), a.to_bits());
    assert_eq!(
        half::f16::from_f32(a).to_bits(),
        0x0001,
        "fp16 subnormal 2^-24"
    );
}

// ---------------------------------------------------------------------------------------------
// G18–G19: SwiGLU-OAI and routing
// ---------------------------------------------------------------------------------------------

/// G18: gpt-oss SwiGLU (gate clamped above at 7 only, linear to [−7, 7], alpha 1.702).
#[test]
fn g18_swiglu_oai() {
    let cases: [(f64, f64, f64); 3] = [
        (8.0, -8.0, -41.99971876981991),
        (1.0, 0.5, 1.268693648899232),
        (-3.0, 2.0, -0.05421392912335791),
    ];
    for (g, l, want) in cases {
        let v = swiglu_oai(g, l);
        assert!(
            ((v - want) / want).abs() <= 1e-12,
            "swiglu_oai({g}, {l}) = {v:e}, want {want:e}"
        );
    }
    assert_eq!(swiglu_oai(0.0, 5.0), 0.0);
    // (−20, 1) -> −6.5868e-14 to its printed precision (5 significant digits).
    let v = swiglu_oai(-20.0, 1.0);
    assert!(
        (v - -6.5868e-14).abs() <= 0.00005e-14,
        "swiglu_oai(-20, 1) = {v:e}"
    );
}

/// G19: logits [2, 1, 0.5, 3], top-2 -> experts [3, 0], weights [0.7310585786300049,
/// 0.2689414213699951], both for gpt-oss top-k-then-softmax and full softmax + renormalize.
#[test]
fn g19_routing() {
    let logits = [2.0f32, 1.0, 0.5, 3.0];
    let want = [0.7310585786300049f64, 0.2689414213699951];
    for scoring in [Scoring::TopkSoftmax, Scoring::Softmax] {
        let cfg = RouterConfig {
            scoring,
            top_k: 2,
            renormalize: true,
            ..RouterConfig::default()
        };
        let r = route(&cfg, &logits, 4, None).unwrap();
        assert_eq!(r.topk_ids, vec![3, 0], "{scoring}");
        for (w, e) in r.topk_weights.iter().zip(want) {
            // fp32 weights: within 2 fp32 ulps of the double-precision value.
            assert!(
                ((*w as f64 - e) / e).abs() <= 2.0 * f32::EPSILON as f64,
                "{scoring}: {w} vs {e}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The published file: assets/golden/vectors.json (G1–G19 transcribed from NUMERICS.md 12)
// ---------------------------------------------------------------------------------------------

/// `assets/golden/vectors.json` is data the project ships for other implementations to test
/// against. It was transcribed by hand from NUMERICS.md section 12; these tests keep it true of
/// our encoder, decoder and packing (and would catch a transcription error in the file).
mod published_vectors {
    use super::*;
    use serde::Deserialize;

    const VECTORS: &str = include_str!("../assets/golden/vectors.json");

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        title: String,
        contract: String,
        provenance: String,
        conventions: serde_json::Value,
        element_decode: Vec<ElementDecode>,
        e8m0_decode: Vec<E8m0Decode>,
        quantize: Vec<Quantize>,
        scale_bytes: Vec<ScaleBytes>,
        packing: Vec<PackingCase>,
        dequantize: Vec<Dequantize>,
        swiglu_oai: Swiglu,
        routing: RoutingCase,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ElementDecode {
        id: String,
        format: String,
        codes: String,
        values: Vec<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct E8m0Decode {
        id: String,
        byte: u8,
        value: String,
        #[serde(default)]
        note: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Quantize {
        id: String,
        #[serde(default)]
        note: Option<String>,
        formats: Vec<String>,
        scale_modes: Vec<String>,
        input: Vec<String>,
        scale: u8,
        codes: String,
        #[serde(default)]
        ints: Option<Vec<i32>>,
        dequantized: Vec<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ScaleBytes {
        id: String,
        format: String,
        amax: String,
        floor: u8,
        even: u8,
        ceil: u8,
        rceil: u8,
        #[serde(default)]
        note: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct PackingCase {
        id: String,
        #[serde(default)]
        note: Option<String>,
        formats: Vec<String>,
        codes: String,
        packed: String,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Dequantize {
        id: String,
        format: String,
        code: String,
        scale: u8,
        value: String,
        #[serde(default)]
        fp16: Option<String>,
        #[serde(default)]
        note: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Swiglu {
        id: String,
        note: String,
        cases: Vec<SwigluCase>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SwigluCase {
        glu: f64,
        lin: f64,
        out: f64,
        #[serde(default)]
        rel_tol: Option<f64>,
        #[serde(default)]
        abs_tol: Option<f64>,
        #[serde(default)]
        note: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RoutingCase {
        id: String,
        note: String,
        logits: Vec<f32>,
        top_k: usize,
        scorings: Vec<String>,
        renormalize: bool,
        topk_ids: Vec<i32>,
        topk_weights: Vec<f64>,
        weight_rel_tol: String,
    }

    fn load() -> File {
        let f: File = serde_json::from_str(VECTORS).expect("assets/golden/vectors.json parses");
        assert!(f.contract.contains("NUMERICS.md") && !f.title.is_empty());
        assert!(!f.provenance.is_empty() && f.conventions.is_object());
        f
    }

    /// A float as written in the file: a decimal literal, NaN/inf/-inf/-0.0, or `0x` + 8 hex
    /// digits (an exact fp32 bit pattern).
    fn float(s: &str) -> f32 {
        match s.strip_prefix("0x") {
            Some(h) => {
                assert_eq!(h.len(), 8, "'{s}': fp32 bit patterns have 8 hex digits");
                f32::from_bits(u32::from_str_radix(h, 16).unwrap())
            }
            None => s.parse().unwrap_or_else(|_| panic!("'{s}' is not a float")),
        }
    }

    fn hex_bytes(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|_| panic!("'{h}' is not hex")))
            .collect()
    }

    fn fmt(s: &str) -> MxFormat {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn mode(s: &str) -> ScaleMode {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Bit-exact comparison, the sign of zero included; any NaN matches NaN.
    fn same(got: f32, want: f32) -> bool {
        (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits()
    }

    #[test]
    fn element_and_scale_decode() {
        let f = load();
        for c in &f.element_decode {
            let format = fmt(&c.format);
            let codes = hex_bytes(&c.codes);
            assert_eq!(codes.len(), c.values.len(), "{}: codes vs values", c.id);
            for (&code, v) in codes.iter().zip(&c.values) {
                let want = float(v);
                let got = decode_elem_f64(format, code) as f32;
                assert!(
                    same(got, want),
                    "{} {format} code {code:#x}: {got} != {v}",
                    c.id
                );
                // At scale 127 (X = 1) the dequantized value is the element value.
                let mut block_codes = [0u8; BLOCK];
                block_codes[0] = code;
                let mut out = [0f32; BLOCK];
                dequantize_block(format, &block_codes, 127, &mut out);
                assert!(
                    same(out[0], want),
                    "{} {format} code {code:#x} at scale 127",
                    c.id
                );
            }
        }
        assert_eq!(f.e8m0_decode.len(), 7);
        for c in &f.e8m0_decode {
            let got = e8m0_to_f32(c.byte);
            assert!(
                same(got, float(&c.value)),
                "{} byte {}: {got:e} != {} ({:?})",
                c.id,
                c.byte,
                c.value,
                c.note
            );
        }
    }

    #[test]
    fn quantize_blocks() {
        let f = load();
        let mut checked = 0;
        for c in &f.quantize {
            let x: Vec<f32> = c.input.iter().map(|s| float(s)).collect();
            let want_codes = hex_bytes(&c.codes);
            assert!(x.len() <= BLOCK && want_codes.len() <= x.len().max(1));
            assert_eq!(want_codes.len(), c.dequantized.len(), "{}", c.id);
            if let Some(ints) = &c.ints {
                let as_codes: Vec<u8> = ints.iter().map(|&n| n as i8 as u8).collect();
                assert_eq!(as_codes, want_codes, "{}: ints vs codes", c.id);
            }
            let mut xb = [0f32; BLOCK];
            xb[..x.len()].copy_from_slice(&x);
            for fs in &c.formats {
                for ms in &c.scale_modes {
                    let (format, m) = (fmt(fs), mode(ms));
                    let what = format!("{} {format} {m} ({:?})", c.id, c.note);
                    let mut codes = [0xAAu8; BLOCK];
                    let s = quantize_block(format, m, &xb, &mut codes);
                    assert_eq!(s, c.scale, "{what}: scale byte");
                    assert_eq!(&codes[..want_codes.len()], &want_codes[..], "{what}: codes");
                    assert!(
                        codes[x.len()..].iter().all(|&b| b == 0),
                        "{what}: padding codes {:?}",
                        &codes[x.len()..]
                    );
                    let mut out = [1f32; BLOCK];
                    dequantize_block(format, &codes, s, &mut out);
                    let mut q = [1f32; BLOCK];
                    qdq_block(format, m, &xb, &mut q);
                    for (j, w) in c.dequantized.iter().enumerate() {
                        let w = float(w);
                        assert!(same(out[j], w), "{what}: dequant[{j}] = {} != {w}", out[j]);
                        assert!(same(q[j], w), "{what}: qdq[{j}] = {} != {w}", q[j]);
                    }
                    // Elements not listed are +0.0: they decode to +0, or NaN in a 0xFF block.
                    let pad = if c.scale == 0xFF { f32::NAN } else { 0.0 };
                    for (j, &o) in out.iter().enumerate().skip(x.len()) {
                        assert!(same(o, pad), "{what}: padding dequant[{j}]");
                    }
                    checked += 1;
                }
            }
        }
        // (format, mode) pairs: 24 + 4 + 8 + 8 + 4 (G4), 3 + 1 (G5), 1 + 3 (G7), 1 + 3 (G8),
        // 1 (G9), 2 + 2 (G10), 1 + 3 (G11), 3 + 1 + 1 + 2 (G12), 1 (G13), 3 * 24 (G14).
        assert_eq!(checked, 48 + 4 + 4 + 4 + 1 + 4 + 4 + 7 + 1 + 72);
    }

    #[test]
    fn scale_bytes() {
        let f = load();
        assert_eq!(f.scale_bytes.len(), 10);
        for c in &f.scale_bytes {
            let format = fmt(&c.format);
            let amax = float(&c.amax);
            for (m, want) in [
                (ScaleMode::Floor, c.floor),
                (ScaleMode::Even, c.even),
                (ScaleMode::Ceil, c.ceil),
                (ScaleMode::RCeil, c.rceil),
            ] {
                assert_eq!(
                    scale_byte(format, m, amax.to_bits()),
                    want,
                    "{} {format} {m} amax {} ({:?})",
                    c.id,
                    c.amax,
                    c.note
                );
            }
        }
    }

    #[test]
    fn packing() {
        let f = load();
        for c in &f.packing {
            let codes = hex_bytes(&c.codes);
            let want = hex_bytes(&c.packed);
            for fs in &c.formats {
                let format = fmt(fs);
                // A whole block: the listed codes first, zeros after.
                let mut block = [0u8; BLOCK];
                block[..codes.len()].copy_from_slice(&codes);
                let mut packed = vec![0xAAu8; format.packed_len(BLOCK)];
                pack_codes(format, &block, &mut packed);
                assert_eq!(
                    &packed[..want.len()],
                    &want[..],
                    "{} {format} ({:?})",
                    c.id,
                    c.note
                );
                assert!(
                    packed[want.len()..].iter().all(|&b| b == 0),
                    "{} {format}: zero codes pack to zero bytes",
                    c.id
                );
                let mut back = [0xAAu8; BLOCK];
                unpack_codes(format, &packed, &mut back);
                assert_eq!(back, block, "{} {format}: unpack", c.id);
            }
        }
    }

    #[test]
    fn dequantize_edges() {
        let f = load();
        for c in &f.dequantize {
            let format = fmt(&c.format);
            let code = hex_bytes(&c.code);
            assert_eq!(code.len(), 1, "{}: one code", c.id);
            let mut codes = [0u8; BLOCK];
            codes[0] = code[0];
            let mut out = [0f32; BLOCK];
            dequantize_block(format, &codes, c.scale, &mut out);
            let mut data = vec![0u8; format.packed_len(BLOCK)];
            pack_codes(format, &codes, &mut data);
            let t = MxTensor::new(format, vec![1, BLOCK], data, vec![c.scale]).unwrap();
            let want = float(&c.value);
            let what = format!(
                "{} {format} code {} scale {} ({:?})",
                c.id, c.code, c.scale, c.note
            );
            assert!(same(out[0], want), "{what}: {:e}", out[0]);
            assert!(same(t.dequantize()[0], want), "{what}: MxTensor");
            if let Some(h) = &c.fp16 {
                let bits = u16::from_str_radix(h.strip_prefix("0x").unwrap(), 16).unwrap();
                assert_eq!(half::f16::from_f32(out[0]).to_bits(), bits, "{what}: fp16");
            }
        }
    }

    #[test]
    fn swiglu_and_routing() {
        let f = load();
        let s = &f.swiglu_oai;
        assert!(s.id == "G18" && !s.note.is_empty());
        for c in &s.cases {
            let v = swiglu_oai(c.glu, c.lin);
            let ok = match (c.rel_tol, c.abs_tol) {
                (Some(r), None) => ((v - c.out) / c.out).abs() <= r,
                (None, Some(a)) => (v - c.out).abs() <= a,
                _ => panic!("G18 ({}, {}): give rel_tol or abs_tol", c.glu, c.lin),
            };
            assert!(
                ok,
                "swiglu_oai({}, {}) = {v:e}, want {:e} {:?}",
                c.glu, c.lin, c.out, c.note
            );
        }
        let r = &f.routing;
        assert!(r.id == "G19" && !r.note.is_empty() && !r.weight_rel_tol.is_empty());
        for sc in &r.scorings {
            let scoring: Scoring = sc.parse().unwrap();
            let cfg = RouterConfig {
                scoring,
                top_k: r.top_k,
                renormalize: r.renormalize,
                ..RouterConfig::default()
            };
            let got = route(&cfg, &r.logits, r.logits.len(), None).unwrap();
            assert_eq!(got.topk_ids, r.topk_ids, "{scoring}");
            for (w, e) in got.topk_weights.iter().zip(&r.topk_weights) {
                assert!(
                    ((*w as f64 - e) / e).abs() <= 2.0 * f32::EPSILON as f64,
                    "{scoring}: {w} vs {e}"
                );
            }
        }
    }
}
