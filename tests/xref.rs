//! Compatibility profiles against vectors produced by the real peer implementations.
//!
//! The files under xref/vectors/ were written by the scripts under xref/ (each installs the
//! pinned peer, runs it on the inputs of xref/common.py and records its version in the file's
//! metadata); nothing here computes an expected value. Each test compares a profile bit for bit
//! (the sign of zero included; NaN matches NaN) with its peer's scale bytes, codes and
//! dequantized / QDQ values, and fails on the first block that differs, naming it.

use mxmoe::format::{MxFormat, ProfileId, ScaleMode, BLOCK};
use mxmoe::io::StFile;
use std::path::PathBuf;

fn open(name: &str) -> StFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("xref/vectors")
        .join(name);
    StFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn floats(f: &StFile, n: &str) -> Vec<f32> {
    f.floats(n).unwrap_or_else(|e| panic!("{n}: {e}")).0
}

fn bytes(f: &StFile, n: &str) -> Vec<u8> {
    f.bytes_u8(n).unwrap_or_else(|e| panic!("{n}: {e}")).0
}

fn cases(f: &StFile, fmt: &str) -> Vec<String> {
    let v: serde_json::Value =
        serde_json::from_str(f.meta("cases").expect("cases metadata")).unwrap();
    match &v {
        serde_json::Value::Object(m) => &m[fmt],
        _ => &v,
    }
    .as_array()
    .unwrap()
    .iter()
    .map(|s| s.as_str().unwrap().to_string())
    .collect()
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Elements and blocks compared, for the summary line each test prints.
#[derive(Default)]
struct Tally {
    blocks: usize,
    elements: usize,
    skipped: usize,
    /// Blocks where the contract's QDQ differs from the peer's: the difference is real.
    contract_differs: usize,
}

impl Tally {
    /// Count the block when the contract (same format and mode) disagrees with the peer's values.
    fn contract(&mut self, format: MxFormat, mode: ScaleMode, x: &[f32], want: &[f32]) {
        let c = ProfileId::Contract.spec().block(format, mode, x);
        if (0..BLOCK).any(|j| !same(c.qdq[j], want[j])) {
            self.contract_differs += 1;
        }
    }
    /// Print the summary and check that the vectors tell the profile from the contract.
    fn done(&self, peer: &str, what: &str) {
        eprintln!(
            "{peer}: {} blocks, {} elements bit-exact ({what}); {} skipped (undefined in the peer); \
             the contract differs on {} blocks",
            self.blocks, self.elements, self.skipped, self.contract_differs
        );
        assert!(self.blocks > 0);
        assert!(
            self.contract_differs > 0,
            "{peer}: the vectors never tell the profile from the contract"
        );
    }
}

/// Compare one block's values; panic naming the case on a difference.
fn check_values(what: &str, desc: &str, i: usize, x: &[f32], got: &[f32], want: &[f32]) {
    for j in 0..BLOCK {
        assert!(
            same(got[j], want[j]),
            "{what}: block {i} ({desc}) element {j}: input {:e} ({:#010x}): mxmoe {:e} ({:#010x}), peer {:e} ({:#010x})",
            x[j],
            x[j].to_bits(),
            got[j],
            got[j].to_bits(),
            want[j],
            want[j].to_bits()
        );
    }
}

fn fmt(s: &str) -> MxFormat {
    s.parse().unwrap()
}

const FLOATS: [&str; 5] = [
    "mxfp4",
    "mxfp6_e2m3",
    "mxfp6_e3m2",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
];
const ALL: [&str; 6] = [
    "mxfp4",
    "mxfp6_e2m3",
    "mxfp6_e3m2",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxint8",
];

#[test]
fn torchao_profile_matches_torchao_vectors() {
    let f = open("torchao.safetensors");
    assert_eq!(f.meta("version"), Some("0.18.0"));
    let p = ProfileId::Torchao.spec();
    let mut t = Tally::default();
    for name in FLOATS {
        let format = fmt(name);
        let x = floats(&f, &format!("{name}.input"));
        let desc = cases(&f, name);
        for mode in ScaleMode::ALL {
            let key = format!("{name}.{mode}");
            let scale = bytes(&f, &format!("{key}.scale"));
            let codes = bytes(&f, &format!("{key}.codes"));
            let deq = floats(&f, &format!("{key}.dequant"));
            let cb = codes.len() / scale.len();
            for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
                let b = p.block(format, mode, xb);
                let what = format!("torchao {key}");
                assert_eq!(
                    b.byte,
                    Some(scale[i]),
                    "{what}: block {i} ({}): scale byte",
                    desc[i]
                );
                let want = &codes[i * cb..(i + 1) * cb];
                if format == MxFormat::Fp4E2M1 {
                    // torchao's `pack_uint4`: c[2i] | c[2i+1] << 4 on u8 (NaN garbage included).
                    for (k, &w) in want.iter().enumerate() {
                        let g = b.codes[2 * k] | b.codes[2 * k + 1].wrapping_shl(4);
                        assert_eq!(g, w, "{what}: block {i} ({}) byte {k}", desc[i]);
                    }
                } else {
                    assert_eq!(&b.codes[..], want, "{what}: block {i} ({}): codes", desc[i]);
                }
                check_values(
                    &what,
                    &desc[i],
                    i,
                    xb,
                    &b.qdq,
                    &deq[i * BLOCK..(i + 1) * BLOCK],
                );
                t.contract(format, mode, xb, &deq[i * BLOCK..(i + 1) * BLOCK]);
                t.blocks += 1;
                t.elements += BLOCK;
            }
        }
    }
    t.done("torchao", "scale, codes, dequant");
}

#[test]
fn quark_profile_matches_quark_vectors() {
    let f = open("quark.safetensors");
    assert_eq!(f.meta("version"), Some("0.13"));
    let p = ProfileId::Quark.spec();
    let mut t = Tally::default();
    for name in ALL {
        let format = fmt(name);
        let x = floats(&f, &format!("{name}.input"));
        let desc = cases(&f, name);
        for mode in [ScaleMode::Floor, ScaleMode::Ceil, ScaleMode::Even] {
            let key = format!("{name}.{mode}");
            let qdq = floats(&f, &format!("{key}.qdq"));
            for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
                let b = p.block(format, mode, xb);
                check_values(
                    &format!("quark {key}"),
                    &desc[i],
                    i,
                    xb,
                    &b.qdq,
                    &qdq[i * BLOCK..(i + 1) * BLOCK],
                );
                t.contract(format, mode, xb, &qdq[i * BLOCK..(i + 1) * BLOCK]);
                t.blocks += 1;
                t.elements += BLOCK;
            }
        }
    }
    t.done("quark", "QDQ");
}

#[test]
fn microxcaling_profile_matches_microxcaling_vectors() {
    let f = open("microxcaling.safetensors");
    let p = ProfileId::Microxcaling.spec();
    let mut t = Tally::default();
    for name in ALL {
        let format = fmt(name);
        let x = floats(&f, &format!("{name}.input"));
        let desc = cases(&f, name);
        let qdq = floats(&f, &format!("{name}.nearest.qdq"));
        for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
            let b = p.block(format, ScaleMode::Floor, xb);
            check_values(
                &format!("microxcaling {name}"),
                &desc[i],
                i,
                xb,
                &b.qdq,
                &qdq[i * BLOCK..(i + 1) * BLOCK],
            );
            t.contract(
                format,
                ScaleMode::Floor,
                xb,
                &qdq[i * BLOCK..(i + 1) * BLOCK],
            );
            t.blocks += 1;
            t.elements += BLOCK;
        }
    }
    t.done("microxcaling", "QDQ");
}

#[test]
fn nvidia_profile_matches_modelopt_vectors() {
    let f = open("nvidia.safetensors");
    assert_eq!(f.meta("version"), Some("0.47.0"));
    let p = ProfileId::Nvidia.spec();
    let mut t = Tally::default();
    for name in ["mxfp8_e4m3", "mxfp4"] {
        let format = fmt(name);
        let x = floats(&f, &format!("{name}.input"));
        let desc = cases(&f, name);
        let scale = bytes(&f, &format!("{name}.scale"));
        let codes = bytes(&f, &format!("{name}.codes"));
        let deq = floats(&f, &format!("{name}.dequant"));
        let cb = codes.len() / scale.len();
        for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
            if xb.iter().any(|v| !v.is_finite()) {
                // ModelOpt casts NaN / Inf scales and codes to u8: undefined (profile docs).
                t.skipped += 1;
                continue;
            }
            let b = p.block(format, ScaleMode::RCeil, xb);
            let what = format!("nvidia {name}");
            assert_eq!(
                b.byte,
                Some(scale[i]),
                "{what}: block {i} ({}): scale byte",
                desc[i]
            );
            let mut packed = [0u8; BLOCK];
            p.pack(format, &b.codes, &mut packed[..cb]);
            assert_eq!(
                &packed[..cb],
                &codes[i * cb..(i + 1) * cb],
                "{what}: block {i} ({}): codes",
                desc[i]
            );
            check_values(
                &what,
                &desc[i],
                i,
                xb,
                &b.qdq,
                &deq[i * BLOCK..(i + 1) * BLOCK],
            );
            t.contract(
                format,
                ScaleMode::RCeil,
                xb,
                &deq[i * BLOCK..(i + 1) * BLOCK],
            );
            t.blocks += 1;
            t.elements += BLOCK;
        }
    }
    assert!(t.skipped <= 6, "{} blocks skipped", t.skipped);
    t.done("nvidia (ModelOpt)", "scale, packed codes, dequant");
}

#[test]
fn ggml_profile_matches_gguf_vectors() {
    let f = open("ggml.safetensors");
    assert_eq!(f.meta("version"), Some("0.19.0"));
    let p = ProfileId::Ggml.spec();
    let x = floats(&f, "input");
    let blocks = bytes(&f, "blocks");
    let deq = floats(&f, "dequant");
    let defined = bytes(&f, "defined");
    let desc = cases(&f, "mxfp4");
    let mut t = Tally::default();
    for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
        if defined[i] == 0 {
            t.skipped += 1;
            continue;
        }
        let b = p.block(MxFormat::Fp4E2M1, ScaleMode::Floor, xb);
        let want = &blocks[i * 17..(i + 1) * 17];
        assert_eq!(b.byte, Some(want[0]), "ggml block {i} ({}): e", desc[i]);
        let mut qs = [0u8; 16];
        p.pack(MxFormat::Fp4E2M1, &b.codes, &mut qs);
        assert_eq!(&qs[..], &want[1..], "ggml block {i} ({}): qs", desc[i]);
        check_values(
            "ggml",
            &desc[i],
            i,
            xb,
            &b.qdq,
            &deq[i * BLOCK..(i + 1) * BLOCK],
        );
        // The profile's dequantize of its own bytes gives the peer's values too.
        let mut codes = [0u8; BLOCK];
        p.unpack(MxFormat::Fp4E2M1, &qs, &mut codes);
        let d: Vec<f32> = codes
            .iter()
            .map(|&c| p.dequant_elem(MxFormat::Fp4E2M1, c, want[0]))
            .collect();
        check_values(
            "ggml dequantize",
            &desc[i],
            i,
            xb,
            &d,
            &deq[i * BLOCK..(i + 1) * BLOCK],
        );
        t.contract(
            MxFormat::Fp4E2M1,
            ScaleMode::Floor,
            xb,
            &deq[i * BLOCK..(i + 1) * BLOCK],
        );
        t.blocks += 1;
        t.elements += BLOCK;
    }
    assert!(t.skipped <= 6, "{} blocks skipped", t.skipped);
    t.done("ggml", "e, split qs, dequant");
}

/// The `ocp` profile (exact floor scale, RNE) against microxcaling with `round="even"`, the OCP
/// authors' emulation with the spec's rounding. microxcaling departs from §6.3 in three ways the
/// test recognises from the input alone (not from either output): its f32 `log2` rounds up
/// within about an ulp below a power of two (the scale or an element exponent one too high), its
/// f32 arithmetic overflows for amax near FLT_MAX, and it drops the sign of -0 (and writes -0
/// for negative MXINT8 values that round to zero). Blocks of the first two kinds are set aside
/// (each kind must occur, so the filter cannot hide everything); zeros compare without their
/// sign; every other block must match bit for bit.
#[test]
fn ocp_profile_matches_microxcaling_even_vectors() {
    let f = open("microxcaling.safetensors");
    let p = ProfileId::Ocp.spec();
    let (mut matched, mut log2_blocks, mut overflow_blocks) = (0, 0, 0);
    for name in ALL {
        let format = fmt(name);
        let x = floats(&f, &format!("{name}.input"));
        let desc = cases(&f, name);
        let qdq = floats(&f, &format!("{name}.even.qdq"));
        for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
            // An f32 log2 that rounds to an integer above the exact floor, for any element.
            let log2_rounds = xb.iter().any(|&v| {
                let a = v.abs();
                a > 0.0
                    && a.is_finite()
                    && ((a as f64).log2() as f32).floor() as i32 != (a.to_bits() >> 23) as i32 - 127
                    && a.to_bits() >> 23 != 0
            });
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            if log2_rounds {
                log2_blocks += 1;
                continue;
            }
            if amax >= 2f32.powi(127) {
                overflow_blocks += 1;
                continue;
            }
            let b = p.block(format, ScaleMode::Floor, xb);
            let want = &qdq[i * BLOCK..(i + 1) * BLOCK];
            for j in 0..BLOCK {
                let (g, w) = (b.qdq[j], want[j]);
                assert!(
                    same(g, w) || (g == 0.0 && w == 0.0),
                    "ocp {name}: block {i} ({}) element {j}: input {:e}: mxmoe {g:e}, microxcaling {w:e}",
                    desc[i],
                    xb[j]
                );
            }
            matched += 1;
        }
    }
    assert!(log2_blocks > 0 && overflow_blocks > 0);
    eprintln!(
        "ocp vs microxcaling(even): {matched} blocks ({} elements) bit-exact up to the sign of zero; \
         set aside: {log2_blocks} f32-log2 blocks, {overflow_blocks} near-FLT_MAX blocks",
        matched * BLOCK
    );
}
