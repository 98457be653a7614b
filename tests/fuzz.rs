//! A mutation fuzzer over the file loaders (issue 11, "Fuzzing"), on stable Rust with proptest:
//! valid seed files (an MX tensor file, layer bundles with every optional tensor, a gpt-oss
//! checkpoint, a token batch, a result, a GGUF) are mutated at the byte level (bit flips, byte sets,
//! truncation, insertions, the header length) and at the header level (numbers in shapes and
//! offsets, dtype and metadata strings, duplicated entries, NaN / 0xFF data), then handed to
//! every loader. The property: a loader returns `Ok` or an error naming the file, and never
//! panics, aborts or hangs; a layer that loads also passes `validate` and runs a CPU forward.
//! proptest shrinks a failing mutation list to a minimal one.
//!
//! * `fuzz_loaders_bounded`: the bounded run in the test suite (a few seconds; the case count
//!   is `MXMOE_FUZZ_CASES`, default 400).
//! * `fuzz_loaders_long`: `#[ignore]`d, the documented long run: `MXMOE_FUZZ_CASES=200000
//!   cargo test --release --test fuzz fuzz_loaders_long -- --ignored --nocapture`
//!   (seed from `MXMOE_FUZZ_SEED`); docs/fuzzing.md records its counts and findings.
//!
//! GGUF: a small gpt-oss GGUF is one of the seeds; `load_layer` reads it (by its magic) through
//! the GGUF loader, so the "layer" target covers it; the byte-level mutations apply unchanged
//! (the header-level ones skip files that are not safetensors). Model directories (several
//! files) are not fuzzed.

use mxmoe::format::{MxFormat, MxTensor, ScaleMode};
use mxmoe::io::{self, OutTensor, StFile, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::moe::{Activation, Routing, Scoring};
use mxmoe::scheme::Scheme;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A loader under test: its name and a call that loads a file (and uses what it loaded).
type Target = (&'static str, fn(&Path) -> Result<(), String>);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Per target: how many mutated files loaded (a fuzzer whose inputs never load explores only
/// the first checks; the long run prints these).
static LOADED: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];

/// Marks a failure after a successful load (a finding: what loads must be usable).
const AFTER_LOAD: &str = "AFTER LOAD";

/// Every loader, and what a command does next with its result.
const TARGETS: &[Target] = &[
    ("safetensors", |p| {
        let f = StFile::open(p).map_err(err)?;
        for n in f.names() {
            let _ = f.floats(&n);
            let _ = f.ints(&n);
            let _ = f.bytes_u8(&n);
        }
        io::float_tensors(&f, false, |_| {}).map(drop).map_err(err)
    }),
    ("mx", |p| {
        let (ts, _) = io::load_mx(p).map_err(err)?;
        for (_, t) in ts {
            if t.data.len() <= 1 << 16 {
                t.dequantize();
            }
        }
        Ok(())
    }),
    ("layer", |p| {
        let l = io::load_layer(p).map_err(err)?.layer;
        // What loaded must be usable: valid, and a forward on a tiny finite batch runs (the
        // file bounds the sizes; keep the work small).
        l.validate().map_err(|e| format!("{AFTER_LOAD} validate: {e}"))?;
        let c = &l.config;
        if l.weight_bytes() <= 1 << 18 && c.hidden <= 1024 && c.n_experts <= 256 {
            let (h, lg) = synth_batch(2, c.hidden, c.n_experts, 1);
            mxmoe::moe::forward(&l, &h, &lg, Default::default())
                .map_err(|e| format!("{AFTER_LOAD} forward: {e}"))?;
        }
        Ok(())
    }),
    ("batch", |p| io::load_batch(p).map(drop).map_err(err)),
    ("result", |p| io::load_result(p).map(drop).map_err(err)),
];

fn bytes_of(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// The seed files, valid, small, covering every optional tensor and metadata key.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n);
    let mut out = Vec::new();
    // An MX tensor file.
    let x: Vec<f32> = (0..128).map(|i| (i as f32 - 60.0) * 0.37).collect();
    let t = MxTensor::quantize(MxFormat::Fp6E2M3, ScaleMode::Even, &x, &[2, 64]).unwrap();
    io::save_mx(&p("mx"), &[("w".into(), t)], ScaleMode::Even).unwrap();
    out.push(("mx", bytes_of(&p("mx"))));
    // A bundle with biases, expert_map, correction bias, groups and the unquantized weights.
    let mut spec = SynthSpec::new(Scheme::OCP_MX[0], 4, 32, 32, 2);
    spec.bias = true;
    let sl = synth_layer(&spec).unwrap();
    let mut l = sl.layer.clone();
    l.config.n_experts = 8;
    l.weights.expert_map = Some(vec![0, -1, 1, -1, 2, -1, 3, -1]);
    l.weights.e_score_correction_bias = Some(vec![0.1, -0.2, 0.0, 0.3, 0.0, 0.0, 0.5, -0.5]);
    l.config.router.scoring = Scoring::Sigmoid;
    l.config.router.n_group = Some(4);
    l.config.router.topk_group = Some(2);
    l.config.router.routed_scaling_factor = 2.5;
    l.validate().unwrap();
    io::save_layer(&p("bundle"), &l, Some((&sl.w13_f32, &sl.w2_f32))).unwrap();
    out.push(("bundle", bytes_of(&p("bundle"))));
    // A plain bundle, another scheme.
    let spec = SynthSpec::new(Scheme::OCP_MX[3], 2, 64, 32, 1);
    io::save_layer(&p("bundle6"), &synth_layer(&spec).unwrap().layer, None).unwrap();
    out.push(("bundle6", bytes_of(&p("bundle6"))));
    // A gpt-oss checkpoint (Hugging Face names).
    let mut spec = SynthSpec::new(Scheme::new(MxFormat::Fp4E2M1, None), 4, 32, 32, 2);
    spec.activation = Activation::SwigluOai;
    spec.bias = true;
    let g = synth_layer(&spec).unwrap().layer;
    let pre = "model.layers.0.mlp.experts.";
    let ts = vec![
        OutTensor::u8(format!("{pre}gate_up_proj_blocks"), vec![4, 64, 1, 16], &g.weights.w13.data),
        OutTensor::u8(format!("{pre}gate_up_proj_scales"), vec![4, 64, 1], &g.weights.w13.scales),
        OutTensor::f32(format!("{pre}gate_up_proj_bias"), vec![4, 64], g.weights.w13_bias.as_ref().unwrap()),
        OutTensor::u8(format!("{pre}down_proj_blocks"), vec![4, 32, 1, 16], &g.weights.w2.data),
        OutTensor::u8(format!("{pre}down_proj_scales"), vec![4, 32, 1], &g.weights.w2.scales),
        OutTensor::f32(format!("{pre}down_proj_bias"), vec![4, 32], g.weights.w2_bias.as_ref().unwrap()),
    ];
    io::save(&p("gptoss"), &ts, HashMap::new()).unwrap();
    out.push(("gptoss", bytes_of(&p("gptoss"))));
    // A token batch and a result.
    let (hidden, logits) = synth_batch(3, 32, 4, 1);
    io::save_batch(
        &p("batch"),
        &TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 32,
            n_experts: 4,
        },
    )
    .unwrap();
    out.push(("batch", bytes_of(&p("batch"))));
    let routing = Routing {
        top_k: 2,
        topk_ids: vec![0, 1, 2, 3, 1, 0],
        topk_weights: vec![0.5; 6],
    };
    io::save_result(&p("result"), &[0.25; 96], 32, &routing, HashMap::new()).unwrap();
    out.push(("result", bytes_of(&p("result"))));
    out.push(("gguf", gguf_seed()));
    out
}

/// A small llama.cpp GGUF with one gpt-oss MoE block (2 experts, H = I = 32): the layout of
/// ggml's docs/gguf.md (version 3: magic, version, tensor count, key/value count, key/values,
/// tensor infos (name, n_dims, ne[], type, offset), data aligned to 32); MXFP4 is ggml type 39,
/// a block is one E8M0 byte + 16 code bytes.
fn gguf_seed() -> Vec<u8> {
    fn s(out: &mut Vec<u8>, t: &str) {
        out.extend((t.len() as u64).to_le_bytes());
        out.extend(t.as_bytes());
    }
    let (e, h, i) = (2u64, 32u64, 32u64);
    let block = |k: u64| -> Vec<u8> {
        let mut b = vec![127u8]; // scale 2^0
        b.extend((0..16).map(|j| ((j * 7 + k * 3) % 256) as u8 & 0x77));
        b
    };
    let mx = |rows: u64| -> Vec<u8> { (0..rows).flat_map(block).collect() };
    let f32s = |n: u64| -> Vec<u8> { (0..n).flat_map(|j| (j as f32 * 0.01).to_le_bytes()).collect() };
    let ts: Vec<(&str, Vec<u64>, u32, Vec<u8>)> = vec![
        ("blk.0.ffn_gate_exps.weight", vec![h, i, e], 39, mx(i * e)),
        ("blk.0.ffn_up_exps.weight", vec![h, i, e], 39, mx(i * e)),
        ("blk.0.ffn_down_exps.weight", vec![i, h, e], 39, mx(h * e)),
        ("blk.0.ffn_gate_exps.bias", vec![i, e], 0, f32s(i * e)),
        ("blk.0.ffn_up_exps.bias", vec![i, e], 0, f32s(i * e)),
        ("blk.0.ffn_down_exps.bias", vec![h, e], 0, f32s(h * e)),
        ("blk.0.ffn_gate_inp.weight", vec![h, e], 0, f32s(h * e)),
    ];
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((ts.len() as u64).to_le_bytes());
    out.extend(2u64.to_le_bytes());
    s(&mut out, "general.architecture");
    out.extend(8u32.to_le_bytes()); // string
    s(&mut out, "gpt-oss");
    s(&mut out, "gpt-oss.expert_used_count");
    out.extend(4u32.to_le_bytes()); // u32
    out.extend(2u32.to_le_bytes());
    let mut off = 0u64;
    let mut offs = Vec::new();
    for (name, ne, ty, data) in &ts {
        s(&mut out, name);
        out.extend((ne.len() as u32).to_le_bytes());
        for d in ne {
            out.extend(d.to_le_bytes());
        }
        out.extend(ty.to_le_bytes());
        out.extend(off.to_le_bytes());
        offs.push(off);
        off += (data.len() as u64).div_ceil(32) * 32;
    }
    while out.len() % 32 != 0 {
        out.push(0);
    }
    let start = out.len();
    for ((_, _, _, data), o) in ts.iter().zip(offs) {
        out.resize(start + o as usize, 0);
        out.extend(data);
    }
    out
}

/// One mutation of a file.
#[derive(Clone, Debug)]
enum Mutation {
    /// Flip bit `bit` of the byte at `pos` (mod the length).
    Flip { pos: usize, bit: u8 },
    /// Set the byte at `pos` to `val`.
    Set { pos: usize, val: u8 },
    /// Cut the file to `len` (mod the length + 1).
    Truncate { len: usize },
    /// Insert bytes at `pos`.
    Insert { pos: usize, bytes: Vec<u8> },
    /// Set the 8-byte header length.
    HeaderLen { val: u64 },
    /// Replace the `k`-th number of the header (shapes, offsets) with `val`.
    Number { k: usize, val: String },
    /// Replace the `k`-th string of the header (dtypes, metadata values, names) with `val`.
    Str { k: usize, val: String },
    /// Duplicate the `k`-th key of the header (a tensor entry or `__metadata__`).
    DupKey { k: usize },
    /// Fill `len` bytes of the data section at `pos` with `val` (0xFF: NaN scales; 0x7F/0xFF
    /// runs: NaN floats).
    Fill { pos: usize, len: usize, val: u8 },
}

fn interesting_number() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0", "1", "2", "3", "7", "31", "32", "33", "63", "64", "255", "256", "1024",
            "65535", "2147483647", "2147483648", "4294967295", "4294967296", "4294967328",
            "1099511627776", "9223372036854775807", "9223372036854775808", "18446744073709551615",
            "18446744073709551616", "-1", "-32", "1.5", "1e3", "1e40", "0.0", "null", "true",
        ])
        .prop_map(String::from),
        (0u64..100_000).prop_map(|v| v.to_string()),
    ]
}

fn interesting_string() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "F32", "F16", "BF16", "U8", "I8", "I32", "I64", "F64", "BOOL", "F8_E4M3", "U64", "",
        "NaN", "inf", "-inf", "-1", "0", "1e40", "-0", "1", "2", "4", "8", "257", "true",
        "false", "yes", "mxfp4", "mxfp5", "w_mxfp4_a_mxfp4", "w_mxfp4", "w_mxfp6_e3m2",
        "w_mxfp9", "even", "floor", "ceil", "rceil", "round", "silu", "swigluoai", "gelu",
        "softmax", "sigmoid", "topk_softmax", "w13_weight", "w13_weight_scale", "w2_weight",
        "w2_weight_scale", "expert_map", "e_score_correction_bias", "hidden_states",
        "router_logits", "output", "topk_ids", "topk_weights", "__metadata__", "x\u{0}y", "é",
    ])
    .prop_map(String::from)
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let pos = any::<usize>();
    prop_oneof![
        3 => (pos.clone(), 0u8..8).prop_map(|(pos, bit)| Mutation::Flip { pos, bit }),
        2 => (pos.clone(), any::<u8>()).prop_map(|(pos, val)| Mutation::Set { pos, val }),
        1 => pos.clone().prop_map(|len| Mutation::Truncate { len }),
        1 => (pos.clone(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(pos, bytes)| Mutation::Insert { pos, bytes }),
        1 => prop_oneof![
            Just(0u64), Just(1), Just(7), Just(8), Just(u64::MAX), Just(1 << 32),
            Just(100_000_001), any::<u64>(), 0u64..4096
        ]
        .prop_map(|val| Mutation::HeaderLen { val }),
        4 => (any::<usize>(), interesting_number()).prop_map(|(k, val)| Mutation::Number { k, val }),
        4 => (any::<usize>(), interesting_string()).prop_map(|(k, val)| Mutation::Str { k, val }),
        1 => any::<usize>().prop_map(|k| Mutation::DupKey { k }),
        2 => (pos, 1usize..64, prop::sample::select(vec![0xFFu8, 0x7F, 0x80, 0x00]))
            .prop_map(|(pos, len, val)| Mutation::Fill { pos, len, val }),
    ]
}

/// The header text and the data section of a safetensors file, when it has them.
fn split(b: &[u8]) -> Option<(String, Vec<u8>)> {
    let n = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let end = 8usize.checked_add(usize::try_from(n).ok()?)?;
    let h = std::str::from_utf8(b.get(8..end)?).ok()?.to_string();
    Some((h, b[end..].to_vec()))
}

fn join(h: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Byte ranges of the tokens of kind `numbers` (else string literals) in a JSON text.
fn tokens(h: &str, numbers: bool) -> Vec<std::ops::Range<usize>> {
    let b = h.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let s = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            if !numbers {
                out.push(s..(i + 1).min(b.len()));
            }
            i += 1;
        } else if b[i] == b'-' || b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_digit() || b"-+.eE".contains(&b[i])) {
                i += 1;
            }
            if numbers {
                out.push(s..i);
            }
        } else {
            i += 1;
        }
    }
    out
}

fn apply(mut b: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let len = b.len().max(1);
    match m {
        Mutation::Flip { pos, bit } => {
            if let Some(x) = b.get_mut(pos % len) {
                *x ^= 1 << bit;
            }
        }
        Mutation::Set { pos, val } => {
            if let Some(x) = b.get_mut(pos % len) {
                *x = *val;
            }
        }
        Mutation::Truncate { len: l } => b.truncate(l % (b.len() + 1)),
        Mutation::Insert { pos, bytes } => {
            let at = pos % (b.len() + 1);
            b.splice(at..at, bytes.iter().copied());
        }
        Mutation::HeaderLen { val } => {
            if b.len() >= 8 {
                b[..8].copy_from_slice(&val.to_le_bytes());
            }
        }
        Mutation::Number { k, val } | Mutation::Str { k, val } => {
            if let Some((mut h, data)) = split(&b) {
                let toks = tokens(&h, matches!(m, Mutation::Number { .. }));
                if !toks.is_empty() {
                    let r = toks[k % toks.len()].clone();
                    let rep = match m {
                        Mutation::Str { .. } => serde_json::to_string(val).unwrap(),
                        _ => val.clone(),
                    };
                    h.replace_range(r, &rep);
                    b = join(&h, &data);
                }
            }
        }
        Mutation::DupKey { k } => {
            if let Some((h, data)) = split(&b) {
                if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&h) {
                    if let Some((key, v)) = map.iter().nth(k % map.len().max(1)) {
                        let entry = format!("{}:{},", serde_json::to_string(key).unwrap(), v);
                        if let Some(rest) = h.trim_start().strip_prefix('{') {
                            b = join(&format!("{{{entry}{rest}"), &data);
                        }
                    }
                }
            }
        }
        Mutation::Fill { pos, len: n, val } => {
            let start = split(&b).map_or(0, |(h, _)| 8 + h.len());
            if b.len() > start {
                let at = start + pos % (b.len() - start);
                let end = (at + n).min(b.len());
                b[at..end].fill(*val);
            }
        }
    }
    b
}

/// One case: the seed mutated, written to `path`, handed to every loader; a panic anywhere or
/// an error that does not name the file fails.
fn check_case(
    seeds: &[(&'static str, Vec<u8>)],
    path: &Path,
    seed: usize,
    muts: &[Mutation],
) -> Result<(), TestCaseError> {
    let (_, base) = &seeds[seed % seeds.len()];
    let bytes = muts.iter().fold(base.clone(), apply);
    std::fs::write(path, &bytes).unwrap();
    let shown = path.display().to_string();
    for (ti, (name, load)) in TARGETS.iter().enumerate() {
        let r = std::panic::catch_unwind(|| load(path));
        if matches!(r, Ok(Ok(()))) {
            LOADED[ti].fetch_add(1, Ordering::Relaxed);
        }
        match r {
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                return Err(TestCaseError::fail(format!("loader '{name}' panicked: {msg}")));
            }
            Ok(Err(e)) if e.starts_with(AFTER_LOAD) => {
                return Err(TestCaseError::fail(format!("loader '{name}': {e}")));
            }
            Ok(Err(e)) if !e.contains(&shown) => {
                return Err(TestCaseError::fail(format!(
                    "loader '{name}': error without the file name: {e}"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Run `cases` fuzz cases from `rng_seed`; panics with the minimal failing case on a finding.
fn fuzz(cases: u32, rng_seed: u64) {
    let seeds = seeds();
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("fuzz.safetensors");
    let mut runner = TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(rng_seed),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    });
    // Silence the panic hook's output for caught panics (proptest reports the minimal case).
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let strat = (any::<usize>(), prop::collection::vec(mutation(), 1..6));
    let r = runner.run(&strat, |(seed, muts)| check_case(&seeds, &path, seed, &muts));
    std::panic::set_hook(prev);
    if let Err(e) = r {
        panic!("fuzz finding: {e}");
    }
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The bounded run of the test suite.
#[test]
fn fuzz_loaders_bounded() {
    let cases = env_u64("MXMOE_FUZZ_CASES", 400) as u32;
    fuzz(cases, env_u64("MXMOE_FUZZ_SEED", 0x6675_7a7a));
}

/// The long run (docs/fuzzing.md): `MXMOE_FUZZ_CASES=200000 cargo test --release --test fuzz
/// fuzz_loaders_long -- --ignored --nocapture`.
#[test]
#[ignore]
fn fuzz_loaders_long() {
    let cases = env_u64("MXMOE_FUZZ_CASES", 100_000) as u32;
    let seed = env_u64("MXMOE_FUZZ_SEED", 0x6c6f_6e67);
    let t0 = std::time::Instant::now();
    fuzz(cases, seed);
    let loaded: Vec<String> = TARGETS
        .iter()
        .zip(&LOADED)
        .map(|((n, _), c)| format!("{n} {}", c.load(Ordering::Relaxed)))
        .collect();
    eprintln!(
        "fuzz_loaders_long: {cases} cases (seed {seed:#x}) x {} loaders, no finding, {:.0} s; \
         mutated files that loaded: {}",
        TARGETS.len(),
        t0.elapsed().as_secs_f64(),
        loaded.join(", ")
    );
}

/// Every seed loads in the loader it is for (a seed that does not load tests only the first
/// checks).
#[test]
fn seeds_load() {
    let d = tempfile::tempdir().unwrap();
    for (name, bytes) in seeds() {
        let p = d.path().join(format!("{name}.safetensors"));
        std::fs::write(&p, &bytes).unwrap();
        let target = match name {
            "mx" => "mx",
            "batch" => "batch",
            "result" => "result",
            _ => "layer",
        };
        let (_, load) = TARGETS.iter().find(|t| t.0 == target).unwrap();
        load(&p).unwrap_or_else(|e| panic!("seed {name}: {e}"));
    }
}

/// The mutators do what they say (a fuzzer whose mutations never reach the header finds
/// nothing): each header-level mutation changes a seed and the loaders see the change.
#[test]
fn mutations_reach_the_header() {
    let seeds = seeds();
    let (_, b) = &seeds[1];
    let dup = apply(b.clone(), &Mutation::DupKey { k: 0 });
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("m.safetensors");
    std::fs::write(&p, &dup).unwrap();
    let e = StFile::open(&p).err().expect("a duplicated key is refused");
    assert!(e.to_string().contains("duplicate key"), "{e}");
    let num = apply(b.clone(), &Mutation::Number { k: 3, val: "4294967296".into() });
    assert_ne!(&num, b);
    assert!(split(&num).unwrap().0.contains("4294967296"));
    let st = apply(b.clone(), &Mutation::Str { k: 1, val: "NaN".into() });
    assert!(split(&st).unwrap().0.contains("\"NaN\""));
    let nan = apply(b.clone(), &Mutation::Fill { pos: 0, len: 8, val: 0xFF });
    assert_eq!(split(&nan).unwrap().1[..8], [0xFF; 8]);
}
