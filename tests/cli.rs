//! The CLI contract (ARCHITECTURE.md "File formats", issue 2 item 5) and bad-input behaviour:
//! clear errors, non-zero exit, no output file, no panic.
//!
//! Over 600 lines: one test per subcommand contract plus the bad-input table; each is short.

use mxmoe::io::{self, OutTensor, StFile, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::scheme::Scheme;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mxmoe"))
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let o = bin().args(args).output().expect("spawn mxmoe");
    Run {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

fn p(d: &Path, name: &str) -> PathBuf {
    d.join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Expect a clean failure: non-zero exit, an `error:` line containing `needle`, no panic, and
/// no output file.
fn expect_fail(args: &[&str], needle: &str, out: Option<&Path>) {
    let r = run(args);
    assert!(!r.ok, "expected failure for {args:?}; stdout {}", r.stdout);
    assert!(
        !r.stderr.contains("panicked"),
        "panic for {args:?}: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains(needle),
        "stderr for {args:?} lacks '{needle}': {}",
        r.stderr
    );
    if let Some(o) = out {
        assert!(!o.exists(), "{} was left behind", o.display());
    }
}

/// The G5 block of NUMERICS.md (amax 5.0 -> scale byte 127 under Even) and its contract codes.
const G5_IN: [f32; 12] = [
    5.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -0.25, -0.75, -1.25, -2.5, -3.5,
];
const G5_CODES: [u8; 12] = [0x6, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x8, 0xA, 0xA, 0xC, 0xE];
/// FP4 values of those codes (NUMERICS.md 1.1), times scale 2^0.
const G5_DEQ: [f32; 12] = [
    4.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, -0.0, -1.0, -1.0, -2.0, -4.0,
];

fn g5_file(d: &Path) -> PathBuf {
    // Two rows: the G5 block padded with zeros, and the same negated.
    let mut row = [0f32; 32];
    row[..12].copy_from_slice(&G5_IN);
    let mut x = row.to_vec();
    x.extend(row.iter().map(|v| -v));
    let f = p(d, "g5.safetensors");
    io::save(&f, &[OutTensor::f32("w", vec![2, 32], &x)], HashMap::new()).unwrap();
    f
}

#[test]
fn quantize_writes_the_contract_layout() {
    let d = tempfile::tempdir().unwrap();
    let inp = g5_file(d.path());
    let out = p(d.path(), "q.safetensors");
    let r = run(&[
        "quantize",
        "--format",
        "mxfp4",
        "--scale-mode",
        "even",
        "--input",
        s(&inp),
        "--output",
        s(&out),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let f = StFile::open(&out).unwrap();
    assert_eq!(f.meta("format"), Some("mxfp4"));
    assert_eq!(f.meta("scale_mode"), Some("even"));
    let (data, ds) = f.bytes_u8("w").unwrap();
    let (scales, ss) = f.bytes_u8("w_scale").unwrap();
    assert_eq!(ds, vec![2, 16]);
    assert_eq!(ss, vec![2, 1]);
    assert_eq!(scales, vec![127, 127]);
    // Low nibble first: byte i = code[2i] | code[2i+1] << 4.
    for i in 0..6 {
        assert_eq!(
            data[i],
            G5_CODES[2 * i] | G5_CODES[2 * i + 1] << 4,
            "byte {i}"
        );
    }
    // Negated row: the sign bit flips (including 0.25 -> -0 code 0x8... and -0.25 -> +0).
    let neg: Vec<u8> = G5_CODES.iter().map(|c| c ^ 0x8).collect();
    for i in 0..6 {
        assert_eq!(
            data[16 + i],
            neg[2 * i] | neg[2 * i + 1] << 4,
            "row 1 byte {i}"
        );
    }
    // The rest of each row is +0 / -0 codes.
    assert!(data[6..16].iter().all(|&b| b == 0));
    assert!(data[22..32].iter().all(|&b| b == 0x88));

    // dequantize gives the contract values.
    let deq = p(d.path(), "dq.safetensors");
    let r = run(&["dequantize", "--input", s(&out), "--output", s(&deq)]);
    assert!(r.ok, "{}", r.stderr);
    let (v, vs) = StFile::open(&deq).unwrap().floats("w").unwrap();
    assert_eq!(vs, vec![2, 32]);
    for i in 0..12 {
        assert_eq!(v[i].to_bits(), G5_DEQ[i].to_bits(), "element {i}");
        assert_eq!(
            v[32 + i].to_bits(),
            (-G5_DEQ[i]).to_bits(),
            "row 1 element {i}"
        );
    }

    // qdq equals dequantize(quantize).
    let qq = p(d.path(), "qdq.safetensors");
    let r = run(&[
        "qdq",
        "--format",
        "mxfp4",
        "--input",
        s(&inp),
        "--output",
        s(&qq),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let (q, _) = StFile::open(&qq).unwrap().floats("w").unwrap();
    assert!(q.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn moe_writes_output_ids_and_weights() {
    let d = tempfile::tempdir().unwrap();
    let layer = p(d.path(), "layer.safetensors");
    let batch = p(d.path(), "batch.safetensors");
    let res = p(d.path(), "res.safetensors");
    let r = run(&[
        "gen",
        "--scheme",
        "w_mxfp4_a_mxfp6_e2m3",
        "--experts",
        "6",
        "--hidden",
        "64",
        "--inter",
        "32",
        "--top-k",
        "2",
        "--tokens",
        "5",
        "--bias",
        "--layer-out",
        s(&layer),
        "--batch-out",
        s(&batch),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let r = run(&[
        "moe",
        "--layer",
        s(&layer),
        "--input",
        s(&batch),
        "--output",
        s(&res),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let f = StFile::open(&res).unwrap();
    assert_eq!(f.dtype("output").unwrap(), safetensors::Dtype::F32);
    assert_eq!(f.shape("output").unwrap(), vec![5, 64]);
    assert_eq!(f.dtype("topk_ids").unwrap(), safetensors::Dtype::I32);
    assert_eq!(f.shape("topk_ids").unwrap(), vec![5, 2]);
    assert_eq!(f.shape("topk_weights").unwrap(), vec![5, 2]);
    // The file round-trips through the library and matches a direct library run.
    let l = io::load_layer(&layer).unwrap().layer;
    let b = io::load_batch(&batch).unwrap();
    let want = mxmoe::moe::forward(&l, &b.hidden, &b.logits, Default::default()).unwrap();
    let got = io::load_result(&res).unwrap();
    assert_eq!(got.routing.topk_ids, want.routing.topk_ids);
    assert_eq!(got.output, want.output);
    // renormalized weights sum to 1 per token.
    for t in 0..5 {
        let s: f32 = got.routing.topk_weights[t * 2..t * 2 + 2].iter().sum();
        assert!((s - 1.0).abs() < 1e-6);
    }

    // verify accepts our own result as bit-exact and rejects a perturbed one.
    let r = run(&[
        "verify",
        "--layer",
        s(&layer),
        "--input",
        s(&batch),
        "--result",
        s(&res),
    ]);
    assert!(
        r.ok && r.stdout.contains("BIT-EXACT"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let mut bad = got.output.clone();
    for v in bad.iter_mut().step_by(3) {
        *v *= 1.5;
    }
    let badp = p(d.path(), "bad.safetensors");
    io::save_result(&badp, &bad, 64, &got.routing, HashMap::new()).unwrap();
    let r = run(&[
        "verify",
        "--layer",
        s(&layer),
        "--input",
        s(&batch),
        "--result",
        s(&badp),
    ]);
    assert!(
        !r.ok && r.stdout.contains("WRONG"),
        "{}{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    for sc in [
        "quantize",
        "dequantize",
        "qdq",
        "moe",
        "gen",
        "check",
        "verify",
        "demo",
    ] {
        let r = run(&[sc, "--help"]);
        assert!(r.ok, "{sc} --help failed");
        assert!(
            r.stdout.contains("Example"),
            "{sc} --help has no example:\n{}",
            r.stdout
        );
    }
}

fn small_layer(d: &Path) -> (PathBuf, PathBuf) {
    let spec = SynthSpec::new(Scheme::OCP_MX[0], 4, 32, 32, 2);
    let sl = synth_layer(&spec).unwrap();
    let layer = p(d, "layer.safetensors");
    io::save_layer(&layer, &sl.layer, None).unwrap();
    let (hidden, logits) = synth_batch(3, 32, 4, 1);
    let batch = p(d, "batch.safetensors");
    io::save_batch(
        &batch,
        &TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 32,
            n_experts: 4,
        },
    )
    .unwrap();
    (layer, batch)
}

#[test]
fn bad_inputs_give_clear_errors_and_no_output() {
    let d = tempfile::tempdir().unwrap();
    let out = p(d.path(), "out.safetensors");
    let o = s(&out);
    let g5 = g5_file(d.path());

    // Missing file.
    expect_fail(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            "/nonexistent.safetensors",
            "--output",
            o,
        ],
        "nonexistent",
        Some(&out),
    );
    // Unknown format / scale mode.
    expect_fail(
        &[
            "quantize",
            "--format",
            "mxfp5",
            "--input",
            s(&g5),
            "--output",
            o,
        ],
        "unknown format",
        Some(&out),
    );
    expect_fail(
        &[
            "qdq",
            "--format",
            "mxfp4",
            "--scale-mode",
            "round",
            "--input",
            s(&g5),
            "--output",
            o,
        ],
        "unknown scale mode",
        Some(&out),
    );
    // Corrupt and truncated safetensors.
    let junk = p(d.path(), "junk.safetensors");
    std::fs::write(&junk, b"this is not a safetensors file at all").unwrap();
    expect_fail(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(&junk),
            "--output",
            o,
        ],
        "not a valid safetensors",
        Some(&out),
    );
    let bytes = std::fs::read(&g5).unwrap();
    let trunc = p(d.path(), "trunc.safetensors");
    std::fs::write(&trunc, &bytes[..bytes.len() - 7]).unwrap();
    expect_fail(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(&trunc),
            "--output",
            o,
        ],
        "not a valid safetensors",
        Some(&out),
    );
    // Last dimension not a multiple of 32.
    let odd = p(d.path(), "odd.safetensors");
    io::save(
        &odd,
        &[OutTensor::f32("x", vec![2, 48], &[1.0; 96])],
        HashMap::new(),
    )
    .unwrap();
    expect_fail(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(&odd),
            "--output",
            o,
        ],
        "not a multiple of the MX block size 32",
        Some(&out),
    );
    expect_fail(
        &[
            "qdq",
            "--format",
            "mxfp4",
            "--input",
            s(&odd),
            "--output",
            o,
        ],
        "'x'",
        Some(&out),
    );
    // Dequantize of a file without MX metadata.
    expect_fail(
        &["dequantize", "--input", s(&g5), "--output", o],
        "format",
        Some(&out),
    );

    // MoE: a good layer and batch, then broken variants.
    let (layer, batch) = small_layer(d.path());
    let ok = run(&[
        "moe",
        "--layer",
        s(&layer),
        "--input",
        s(&batch),
        "--output",
        o,
    ]);
    assert!(ok.ok, "{}", ok.stderr);
    std::fs::remove_file(&out).unwrap();
    // top_k > experts.
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&layer),
            "--input",
            s(&batch),
            "--output",
            o,
            "--top-k",
            "9",
        ],
        "top_k",
        Some(&out),
    );
    // Router logits with the wrong expert count.
    let (hidden, logits) = synth_batch(3, 32, 5, 1);
    let b5 = p(d.path(), "b5.safetensors");
    io::save_batch(
        &b5,
        &TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 32,
            n_experts: 5,
        },
    )
    .unwrap();
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&layer),
            "--input",
            s(&b5),
            "--output",
            o,
        ],
        "router_logits has 5 experts",
        Some(&out),
    );
    // NaN in router logits.
    let (hidden, mut logits) = synth_batch(3, 32, 4, 1);
    logits[6] = f32::NAN;
    let bn = p(d.path(), "bnan.safetensors");
    io::save_batch(
        &bn,
        &TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 32,
            n_experts: 4,
        },
    )
    .unwrap();
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&layer),
            "--input",
            s(&bn),
            "--output",
            o,
        ],
        "router_logits[1, 2]",
        Some(&out),
    );
    // Wrong hidden size.
    let (hidden, logits) = synth_batch(3, 64, 4, 1);
    let bh = p(d.path(), "bh.safetensors");
    io::save_batch(
        &bh,
        &TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 64,
            n_experts: 4,
        },
    )
    .unwrap();
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&layer),
            "--input",
            s(&bh),
            "--output",
            o,
        ],
        "H = 64",
        Some(&out),
    );
    // Wrong dtype for hidden_states.
    let bi = p(d.path(), "bi.safetensors");
    io::save(
        &bi,
        &[
            OutTensor::i32("hidden_states", vec![1, 32], &[0; 32]),
            OutTensor::f32("router_logits", vec![1, 4], &[0.0; 4]),
        ],
        HashMap::new(),
    )
    .unwrap();
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&layer),
            "--input",
            s(&bi),
            "--output",
            o,
        ],
        "dtype I32",
        Some(&out),
    );
    // Missing tensor in the batch.
    let bm = p(d.path(), "bm.safetensors");
    io::save(
        &bm,
        &[OutTensor::f32("hidden_states", vec![1, 32], &[0.0; 32])],
        HashMap::new(),
    )
    .unwrap();
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&layer),
            "--input",
            s(&bm),
            "--output",
            o,
        ],
        "missing tensor 'router_logits'",
        Some(&out),
    );

    // Layer files: unknown scheme, wrong shapes, expert ids out of range.
    let f = StFile::open(&layer).unwrap();
    let names = f.names();
    let rewrite = |path: &Path,
                   meta_patch: &[(&str, &str)],
                   drop: &[&str],
                   extra: Vec<OutTensor>| {
        let mut ts = Vec::new();
        for n in &names {
            if drop.contains(&n.as_str()) {
                continue;
            }
            let dt = f.dtype(n).unwrap();
            let sh = f.shape(n).unwrap();
            let t = match dt {
                safetensors::Dtype::U8 => OutTensor::u8(n.clone(), sh, &f.bytes_u8(n).unwrap().0),
                _ => OutTensor::f32(n.clone(), sh, &f.floats(n).unwrap().0),
            };
            ts.push(t);
        }
        ts.extend(extra);
        let mut meta = f.metadata().clone();
        for (k, v) in meta_patch {
            meta.insert(k.to_string(), v.to_string());
        }
        io::save(path, &ts, meta).unwrap();
    };
    let l1 = p(d.path(), "l1.safetensors");
    rewrite(&l1, &[("scheme", "w_mxfp3_a_mxfp4")], &[], vec![]);
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&l1),
            "--input",
            s(&batch),
            "--output",
            o,
        ],
        "unknown scheme",
        Some(&out),
    );
    let l2 = p(d.path(), "l2.safetensors");
    rewrite(
        &l2,
        &[],
        &["w2_weight_scale"],
        vec![OutTensor::u8(
            "w2_weight_scale",
            vec![4, 32, 2],
            &[127; 256],
        )],
    );
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&l2),
            "--input",
            s(&batch),
            "--output",
            o,
        ],
        "w2_weight_scale",
        Some(&out),
    );
    let l3 = p(d.path(), "l3.safetensors");
    rewrite(
        &l3,
        &[],
        &[],
        vec![OutTensor::i32("expert_map", vec![4], &[0, 1, 7, -1])],
    );
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&l3),
            "--input",
            s(&batch),
            "--output",
            o,
        ],
        "expert_map entry 7",
        Some(&out),
    );
    let l4 = p(d.path(), "l4.safetensors");
    rewrite(&l4, &[("top_k", "two")], &[], vec![]);
    expect_fail(
        &[
            "moe",
            "--layer",
            s(&l4),
            "--input",
            s(&batch),
            "--output",
            o,
        ],
        "metadata 'top_k'",
        Some(&out),
    );
}

#[test]
fn failed_write_leaves_no_partial_file() {
    // Writing into a folder that does not exist fails cleanly.
    let d = tempfile::tempdir().unwrap();
    let g5 = g5_file(d.path());
    let out = d.path().join("no/such/dir/out.safetensors");
    expect_fail(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(&g5),
            "--output",
            s(&out),
        ],
        "error:",
        Some(&out),
    );
    // And no temporary file is left next to the target either.
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")),
        "{left:?}"
    );
}

#[test]
fn bench_writes_json_with_floor_ratios() {
    let d = tempfile::tempdir().unwrap();
    let j = p(d.path(), "bench.json");
    let r = run(&[
        "bench",
        "--backend",
        "cpu",
        "--shape",
        "custom",
        "--experts",
        "4",
        "--hidden",
        "64",
        "--inter",
        "64",
        "--top-k",
        "2",
        "--tokens",
        "1,3",
        "--iters",
        "2",
        "--rotate",
        "2",
        "--json",
        s(&j),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 2);
    for (row, m) in a.iter().zip([1, 3]) {
        assert_eq!(row["tokens"], m);
        let active = row["active_experts"].as_f64().unwrap();
        assert!((1.0..=4.0).contains(&active));
        // Each MXFP4 expert: (2*64*64 + 64*64) * 17/32 bytes.
        let per = (3 * 64 * 64) as f64 * 17.0 / 32.0;
        assert!((row["weight_bytes"].as_f64().unwrap() - active * per).abs() < 1e-6);
        assert!(row["ratio_to_floor"].as_f64().unwrap() > 0.0);
        assert_eq!(row["rel_l2_vs_cpu"].as_f64().unwrap(), 0.0);
        // The check batch is compared before the warm-up and again after the timed loops.
        assert_eq!(
            row["checked_forwards"].as_u64().unwrap(),
            1 + mxmoe::bench::CHECK_REPEATS as u64
        );
    }
    let bad = run(&["bench", "--backend", "cpu", "--tokens", "1,x"]);
    assert!(!bad.ok && bad.stderr.contains("not a number"));
}

/// `MXMOE_GEMM` chooses the wgpu prefill GEMM and `mxmoe info` says which runs and why:
/// `tiled` names itself as the reason, an unknown value is refused with the accepted ones.
/// Needs an adapter (MXMOE_REQUIRE_GPU=1: a missing one fails; otherwise SKIPPED).
#[test]
fn gemm_knob_shows_in_info() {
    if mxmoe::backend::Backend::open(mxmoe::backend::BackendKind::Wgpu, None).is_err() {
        assert!(
            std::env::var("MXMOE_REQUIRE_GPU").as_deref() != Ok("1"),
            "no GPU adapter but MXMOE_REQUIRE_GPU=1"
        );
        eprintln!("SKIPPED: no GPU adapter");
        return;
    }
    let info = |v: &str| {
        let o = bin().env("MXMOE_GEMM", v).arg("info").output().unwrap();
        assert!(o.status.success(), "MXMOE_GEMM={v} mxmoe info failed");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let t = info("tiled");
    assert!(
        t.contains("prefill GEMM: tiled f32 (moe_gemm.wgsl): MXMOE_GEMM=tiled"),
        "{t}"
    );
    let f = info("fast");
    assert!(
        f.contains("MXMOE_GEMM=fast: expected tiled, coop or auto"),
        "{f}"
    );
    assert!(info("auto").contains("prefill GEMM: "));
    // The cooperative kernel's knob: a bad value is refused by name on every adapter.
    let o = bin()
        .env("MXMOE_COOP_KERNEL", "k128")
        .arg("info")
        .output()
        .unwrap();
    let k = String::from_utf8_lossy(&o.stdout);
    assert!(
        k.contains("MXMOE_COOP_KERNEL=k128: expected k32, k64, k64p, k64pw or auto"),
        "{k}"
    );
    // k64p is a name, not a prefix: a near miss is refused too.
    let o = bin()
        .env("MXMOE_COOP_KERNEL", "k64q")
        .arg("info")
        .output()
        .unwrap();
    let k = String::from_utf8_lossy(&o.stdout);
    assert!(
        k.contains("MXMOE_COOP_KERNEL=k64q: expected k32, k64, k64p, k64pw or auto"),
        "{k}"
    );
}

/// `--backend wgpu` on the CLI: QDQ/quantize bit-identical to the CPU's files, MoE within the
/// conformance bound with identical routing. Needs an adapter: with MXMOE_REQUIRE_GPU=1 (CI) a
/// missing one fails, otherwise the test reports SKIPPED.
#[test]
fn wgpu_backend_through_the_cli_matches_cpu() {
    if mxmoe::backend::Backend::open(mxmoe::backend::BackendKind::Wgpu, None).is_err() {
        assert!(
            std::env::var("MXMOE_REQUIRE_GPU").as_deref() != Ok("1"),
            "no GPU adapter but MXMOE_REQUIRE_GPU=1"
        );
        eprintln!("SKIPPED: no GPU adapter");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let g5 = g5_file(d.path());
    for (cmd, extra) in [
        (
            "qdq",
            vec!["--format", "mxfp6_e3m2", "--scale-mode", "rceil"],
        ),
        ("quantize", vec!["--format", "mxfp4"]),
    ] {
        let mut outs = Vec::new();
        for be in ["cpu", "wgpu"] {
            let o = p(d.path(), &format!("{cmd}-{be}.safetensors"));
            let mut args = vec![cmd, "--backend", be, "--input", s(&g5), "--output", s(&o)];
            args.extend(extra.iter().copied());
            let r = run(&args);
            assert!(r.ok, "{args:?}: {}", r.stderr);
            outs.push(std::fs::read(&o).unwrap());
        }
        assert_eq!(outs[0], outs[1], "{cmd}: cpu and wgpu files differ");
    }
    let layer = p(d.path(), "layer.safetensors");
    let batch = p(d.path(), "batch.safetensors");
    let r = run(&[
        "gen",
        "--scheme",
        "w_mxfp4_a_mxfp6_e2m3",
        "--experts",
        "6",
        "--hidden",
        "64",
        "--inter",
        "64",
        "--top-k",
        "2",
        "--tokens",
        "9",
        "--layer-out",
        s(&layer),
        "--batch-out",
        s(&batch),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let mut res = Vec::new();
    for be in ["cpu", "wgpu"] {
        let o = p(d.path(), &format!("res-{be}.safetensors"));
        let r = run(&[
            "moe",
            "--backend",
            be,
            "--accumulate",
            "f32",
            "--layer",
            s(&layer),
            "--input",
            s(&batch),
            "--output",
            s(&o),
        ]);
        assert!(r.ok, "{be}: {}", r.stderr);
        res.push(io::load_result(&o).unwrap());
    }
    assert_eq!(res[0].routing.topk_ids, res[1].routing.topk_ids);
    let (rel, _) = mxmoe::check::rel_l2(&res[1].output, &res[0].output);
    assert!(rel <= mxmoe::check::MOE_REL_L2, "rel-L2 {rel}");
}

/// `mxmoe check --json`: `suite`, `seconds`, `totals` and `backends`, one object per backend
/// with `backend`, `adapter` and `cases` (each `name`, `status`, `detail`, `ms`, plus `flops`
/// and `bytes`); a backend that cannot be opened has `backend`, `status` and `reason`. A
/// backend named explicitly that is not available is a failure (tests/harden.rs has the rest).
#[test]
fn check_json_keeps_its_fields() {
    let d = tempfile::tempdir().unwrap();
    let j = p(d.path(), "check.json");
    let r = run(&["check", "--backend", "cpu", "--json", s(&j)]);
    assert!(r.ok, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("cpu: ") && r.stdout.contains(" 0 failed"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let a = v["backends"].as_array().unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["backend"], "cpu");
    assert!(a[0]["adapter"].is_string());
    let cases = a[0]["cases"].as_array().unwrap();
    assert!(cases.len() > 300, "{} cases", cases.len());
    for c in cases {
        assert_eq!(c["status"], "OK", "{c}");
        assert!(c["name"].is_string() && c["detail"].is_string() && c["ms"].is_number());
        assert!(c["flops"].is_number() && c["bytes"].is_number());
    }
    assert!(cases.iter().any(|c| c["name"] == "qdq/mxfp4/even/special"));
    assert_eq!(v["totals"]["cases"].as_u64().unwrap() as usize, cases.len());
    assert_eq!(v["totals"]["passed"], v["totals"]["cases"]);
    // The HIP backend named explicitly: not compiled in, or built (`--features hip`) on a
    // machine without a HIP-capable GPU, is a failure naming the reason; on a machine with a
    // GPU it runs the catalog, which must pass.
    let r = run(&[
        "check",
        "--backend",
        "hip",
        "--suite",
        "quick",
        "--json",
        s(&j),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let h = &v["backends"][0];
    assert_eq!(h["backend"], "hip");
    if let Some(reason) = h["reason"].as_str() {
        assert!(!r.ok, "{}{}", r.stdout, r.stderr);
        assert_eq!(h["status"], "FAIL");
        let want = if cfg!(feature = "hip") {
            "unavailable"
        } else {
            "not compiled"
        };
        assert!(reason.contains(want), "{reason}");
    } else {
        let built_with_hip = cfg!(feature = "hip");
        assert!(built_with_hip, "hip ran without the feature: {h}");
        assert!(r.ok, "{}{}", r.stdout, r.stderr);
        assert!(h["cases"].as_array().is_some_and(|c| c.len() > 300), "{h}");
    }
    let bad = run(&["check", "--suite", "huge"]);
    assert!(!bad.ok && bad.stderr.contains("unknown suite"));
}

#[test]
fn verify_json_diagnosis_and_exit_codes() {
    use mxmoe::check::faults::Fault;
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let l = io::load_layer(&layer).unwrap().layer;
    let b = io::load_batch(&batch).unwrap();
    let code = |res: &Path, json: &Path| {
        let o = bin()
            .args(["verify", "--layer", s(&layer), "--input", s(&batch)])
            .args(["--result", s(res), "--json", s(json)])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        (o.status.code(), out)
    };
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    // Our own result, top-k order reversed: a match, the contract named.
    let mut want = mxmoe::moe::forward(&l, &b.hidden, &b.logits, Default::default()).unwrap();
    want.routing
        .topk_ids
        .chunks_mut(2)
        .for_each(|c| c.reverse());
    want.routing
        .topk_weights
        .chunks_mut(2)
        .for_each(|c| c.reverse());
    let (res, js) = (p(d.path(), "ok.safetensors"), p(d.path(), "ok.json"));
    io::save_result(&res, &want.output, 32, &want.routing, HashMap::new()).unwrap();
    let (c, out) = code(&res, &js);
    assert_eq!(c, Some(0), "{out}");
    assert!(
        out.contains("verdict: BIT-EXACT") && out.contains("variant: contract"),
        "{out}"
    );
    let j = read(&js);
    assert_eq!(
        (&j["verdict"], &j["variant"]),
        (&"match".into(), &"contract".into())
    );
    assert_eq!(j["diagnosis"].as_array().unwrap().len(), 0);
    // The intermediate QDQ left out: a mismatch, diagnosed.
    let bad = Fault::IntermediateQdqMissing.inject(&l, &b, None).unwrap();
    let (res, js) = (p(d.path(), "bad.safetensors"), p(d.path(), "bad.json"));
    io::save_result(&res, &bad.output, 32, &bad.routing, HashMap::new()).unwrap();
    let (c, out) = code(&res, &js);
    assert_eq!(c, Some(1), "{out}");
    assert!(out.contains("diagnosis"), "{out}");
    let j = read(&js);
    assert_eq!(j["verdict"], "mismatch");
    assert!(j["variant"].is_null());
    assert_eq!(
        j["diagnosis"][0]["fault"], "intermediate_qdq_missing",
        "{j}"
    );
    assert!(j["diagnosis"][0]["rel_l2"].as_f64().unwrap() < 1e-12);
    // Output only (no routing): still judged, the ids are not given.
    let (res, js) = (p(d.path(), "out.safetensors"), p(d.path(), "out.json"));
    let t = OutTensor::f32("output", vec![3, 32], &want.output);
    io::save(&res, &[t], HashMap::new()).unwrap();
    let (c, out) = code(&res, &js);
    assert_eq!(c, Some(0), "{out}");
    assert!(out.contains("routing: ids not given"), "{out}");
    assert!(read(&js)["ids_identical"].is_null());
    // A missing file: exit code 2, no report.
    let (c, _) = code(&p(d.path(), "missing.safetensors"), &p(d.path(), "m.json"));
    assert_eq!(c, Some(2));
    assert!(!p(d.path(), "m.json").exists());
    let r = run(&["verify", "--help"]);
    assert!(r.stdout.contains("intermediate_qdq_missing") && r.stdout.contains("Exit codes"));
}
