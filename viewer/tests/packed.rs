//! The packed-weight statistics (no unquantized weights needed) against hand-computed values:
//! code classes from the OCP tables, a hand-built two-expert MXFP4 tensor, the re-quantization
//! table of a hand-made block, quantiles; and a packed-only layer file through every view.

use mxmoe::format::{pack_codes, MxFormat, MxTensor, ScaleMode, BLOCK};
use mxmoe_viewer::analysis::packed::{
    code_class, magnitudes, packed_tensor, quantiles, requant, sample_stride, CodeClass,
};
use mxmoe_viewer::app::{Results, Slot};
use mxmoe_viewer::data::Source;

/// OCP MX v1.0 FP4 E2M1: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
#[test]
fn code_classes_follow_the_ocp_tables() {
    use CodeClass::*;
    let fp4 = [Zero, Subnormal, Normal, Normal, Normal, Normal, Normal, Max];
    for (c, want) in fp4.iter().enumerate() {
        assert_eq!(code_class(MxFormat::Fp4E2M1, c as u8), *want, "code {c}");
        assert_eq!(
            code_class(MxFormat::Fp4E2M1, c as u8 | 8),
            *want,
            "code -{c}"
        );
    }
    // FP8 E4M3: S.1111.111 is NaN, S.1111.110 = 448 is the largest, 0x01 = 2^-9 subnormal,
    // 0x08 = 2^-6 the smallest normal.
    let e4m3 = MxFormat::Fp8E4M3;
    assert_eq!(code_class(e4m3, 0x7F), NonFinite);
    assert_eq!(code_class(e4m3, 0xFF), NonFinite);
    assert_eq!(code_class(e4m3, 0x7E), Max);
    assert_eq!(code_class(e4m3, 0x01), Subnormal);
    assert_eq!(code_class(e4m3, 0x07), Subnormal);
    assert_eq!(code_class(e4m3, 0x08), Normal);
    assert_eq!(code_class(e4m3, 0x80), Zero);
    // FP8 E5M2: 0x7C = +Inf, 0x7D NaN, 0x7B = 57344 the largest.
    assert_eq!(code_class(MxFormat::Fp8E5M2, 0x7C), NonFinite);
    assert_eq!(code_class(MxFormat::Fp8E5M2, 0x7B), Max);
    // MXINT8: no subnormals; ±127/64 and -128/64 (beyond max) are ±max.
    let i8f = MxFormat::Int8;
    assert_eq!(code_class(i8f, 0), Zero);
    assert_eq!(code_class(i8f, 1), Normal);
    assert_eq!(code_class(i8f, 127), Max);
    assert_eq!(code_class(i8f, 0x81), Max);
    assert_eq!(code_class(i8f, 0x80), Max);
    assert_eq!(
        magnitudes(MxFormat::Fp4E2M1),
        vec![0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    );
}

fn fp4_tensor(rows: &[([u8; BLOCK], u8)], n_rows: usize) -> MxTensor {
    let f = MxFormat::Fp4E2M1;
    let mut data = Vec::new();
    let mut scales = Vec::new();
    for (codes, byte) in rows {
        let mut p = [0u8; 16];
        pack_codes(f, codes, &mut p);
        data.extend_from_slice(&p);
        scales.push(*byte);
    }
    let k = rows.len() / n_rows * BLOCK;
    MxTensor::new(f, vec![n_rows, 1, k], data, scales).unwrap()
}

fn halves(a: u8, b: u8) -> [u8; BLOCK] {
    let mut c = [a; BLOCK];
    c[16..].fill(b);
    c
}

/// Expert 0: a block of 6s (scale 2^0) and a block of 16 zeros + 16 halves (2^-2); expert 1: a
/// block of ±1 alternating (2^3) and a NaN block (0xFF).
#[test]
fn packed_statistics_of_a_hand_built_tensor() {
    let mut alt = [0u8; BLOCK];
    for (i, c) in alt.iter_mut().enumerate() {
        *c = if i % 2 == 0 { 0x2 } else { 0xA };
    }
    let t = fp4_tensor(
        &[
            ([0x7; BLOCK], 127),
            (halves(0x0, 0x1), 125),
            (alt, 130),
            ([0; BLOCK], 0xFF),
        ],
        2,
    );
    let p = packed_tensor("w", &t, 2);
    assert_eq!((p.n_experts, p.rows_per_expert, p.k), (2, 1, 64));
    let sh = |e: usize, b: usize| p.scale_hist[e * 256 + b];
    assert_eq!(
        (sh(0, 127), sh(0, 125), sh(1, 130), sh(1, 255)),
        (1, 1, 1, 1)
    );
    assert_eq!(p.scale_hist.iter().sum::<u64>(), 4);
    let ch = |e: usize, c: usize| p.code_hist[e * 16 + c];
    assert_eq!((ch(0, 7), ch(0, 0), ch(0, 1)), (32, 16, 16));
    assert_eq!((ch(1, 2), ch(1, 0xA), ch(1, 0)), (16, 16, 32));
    assert_eq!(p.class_share(Some(0), CodeClass::Max), 0.5);
    assert_eq!(p.class_share(Some(0), CodeClass::Zero), 0.25);
    assert_eq!(p.class_share(Some(0), CodeClass::Subnormal), 0.25);
    assert_eq!(p.class_share(Some(1), CodeClass::Zero), 0.5);
    assert_eq!(p.class_share(Some(1), CodeClass::Normal), 0.5);
    assert_eq!(p.class_share(None, CodeClass::Max), 0.25);
    // Largest |element| per block: 6 (index 7), 0.5 (index 1), 1 (index 2); the NaN block
    // is not counted.
    assert_eq!(p.block_max_hist, vec![0, 1, 1, 0, 0, 0, 0, 1]);
    // Row spans: expert 0 has exponents 0 and -2 (span 2), expert 1 only 3 (span 0).
    assert_eq!(p.row_span_hist, vec![1, 0, 1]);
    assert_eq!(p.row_span_mean, vec![2.0, 0.0]);
    assert_eq!(p.nonfinite_blocks(), 1);
    assert_eq!(p.exp_range(), Some((-2, 3)));
    let (lo, hi, m) = p.exp_matrix().unwrap();
    assert_eq!((lo, hi, m.len()), (-2, 3, 12));
    // Rows run from exponent 3 (row 0) down to -2 (row 5); columns are experts.
    let at = |x: i32, e: usize| m[(hi - x) as usize * 2 + e];
    assert_eq!((at(0, 0), at(-2, 0), at(3, 1)), (0.5, 0.5, 1.0));
    assert_eq!(m.iter().sum::<f32>(), 2.0);
}

/// A block of 16 x 6.0 and 16 x 0.5 (scale 2^0) re-quantized. FP4: floor (floor(log2 6) - 2
/// = 0), even (6 = 1.5 * 2^2 rounds at one mantissa bit to 1.75 * 2^2: no carry) and rceil
/// (6 / 6 = 1 = 2^0) keep the scale: exact. ceil takes 2^(3-2) = 2: 6 -> 3 exact, 0.5 -> 0.25,
/// a tie between 0 and 0.5 that rounds to the even code 0: error 16 * 0.5^2 = 4 against
/// 16 * 36 + 16 * 0.25 = 580, rel = sqrt(4 / 580). FP6 E2M3 holds 0.25 (step 0.125): exact
/// everywhere. MXINT8 floor: scale 2^2, 6/4 = 96/64 and 0.5/4 = 8/64: exact.
#[test]
fn requant_table_of_a_hand_made_block() {
    let t = fp4_tensor(&[(halves(0x7, 0x1), 127)], 1);
    let q = requant("w", &t, 1 << 20);
    let fi = |f: MxFormat| MxFormat::ALL.iter().position(|&x| x == f).unwrap();
    let mi = |m: ScaleMode| ScaleMode::ALL.iter().position(|&x| x == m).unwrap();
    let fp4 = &q.rel[fi(MxFormat::Fp4E2M1)];
    assert_eq!(fp4[mi(ScaleMode::Floor)], 0.0);
    assert_eq!(fp4[mi(ScaleMode::Even)], 0.0);
    assert_eq!(fp4[mi(ScaleMode::RCeil)], 0.0);
    let want = (4.0f64 / 580.0).sqrt();
    assert!((fp4[mi(ScaleMode::Ceil)] - want).abs() < 1e-12, "{fp4:?}");
    assert_eq!(q.rel[fi(MxFormat::Fp6E2M3)], [0.0; 4]);
    assert_eq!(q.rel[fi(MxFormat::Int8)][mi(ScaleMode::Floor)], 0.0);
    // Nothing clipped by floor on values already on the grid.
    assert_eq!(
        q.saturated[fi(MxFormat::Fp4E2M1)][mi(ScaleMode::Floor)],
        0.0
    );
    assert_eq!((q.sampled_rows, q.total_rows), (1, 1));
}

#[test]
fn sampling_and_quantiles() {
    assert_eq!(sample_stride(100, 64, 1000), 7);
    assert_eq!(sample_stride(10, 64, 1000), 1);
    let v = [3.0, 1.0, 2.0, f32::NAN, 5.0, 4.0];
    assert_eq!(quantiles(&v, 3), vec![1.0, 3.0, 5.0]);
    assert_eq!(quantiles(&v, 5), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(quantiles(&v, 2), vec![1.0, 5.0]);
    assert!(quantiles(&[f32::NAN], 4).is_empty());
}

/// A layer file without unquantized weights (what MXFP4 checkpoints are): every view but the
/// error against the originals is computed; the batch is labelled synthetic.
#[test]
fn packed_only_layer_file_gets_every_view() {
    use mxmoe::moe::synth::{synth_layer, SynthSpec};
    let dir = tempfile::tempdir().unwrap();
    let s = synth_layer(&SynthSpec::new(
        mxmoe::scheme::Scheme::OCP_MX[0],
        8,
        64,
        64,
        2,
    ))
    .unwrap();
    let path = dir.path().join("packed.safetensors");
    mxmoe::io::save_layer(&path, &s.layer, None).unwrap();
    let r = Results::compute(&Source::files(&path, None, 12));
    let d = r.dataset.ready().expect("loads");
    assert!(d.w13_orig.is_none());
    assert!(
        d.batch.is_synthetic(),
        "no --input: the batch must be marked synthetic"
    );
    assert!(matches!(r.weights, Slot::Ready(ref w) if w.is_none()));
    let p = r.packed.ready().expect("packed view");
    // Weights quantized from f32 with `even`: every block's largest element is in the top
    // binade (4 or 6) of FP4.
    for t in [&p.w13, &p.w2] {
        let total: u64 = t.block_max_hist.iter().sum();
        let top: u64 = t.block_max_hist[6..].iter().sum();
        assert_eq!(top, total, "{}: {:?}", t.name, t.block_max_hist);
    }
    // The stored MXFP4 values re-quantized to MXFP4 with the rule that wrote them: exact.
    let fi = MxFormat::ALL
        .iter()
        .position(|&x| x == MxFormat::Fp4E2M1)
        .unwrap();
    let mi = ScaleMode::ALL
        .iter()
        .position(|&x| x == ScaleMode::Even)
        .unwrap();
    assert_eq!(p.requant13.rel[fi][mi], 0.0);
    assert!(r.acts.ready().is_some() && r.routing.ready().is_some());
    assert!(r.schemes.ready().is_some());
    assert!(p.csv().contains("# re-quantization of the stored values"));
}
