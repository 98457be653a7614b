//! The front door, hardened (issue 11, "A hardened front door" and "CI-friendly answers"): one
//! test per class of the corpus of bad inputs that once panicked, aborted, hung, lost data or
//! was silently accepted, through the CLI as a user meets it. Run against the code before the
//! fixes, 15 of the 16 failed for the reason of their class (docs/fuzzing.md lists the classes,
//! the tests, the fixes and that run).
//!
//! Over 600 lines: one short test per corpus class plus the shared file builders.

use mxmoe::io::{self, OutTensor, StFile, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::scheme::Scheme;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mxmoe"));
    c.env("RUST_BACKTRACE", "0");
    c
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run mxmoe; kill it after `limit` (a hang is a failure, reported as such).
fn run_for(args: &[&str], limit: Duration) -> Run {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mxmoe");
    let t0 = Instant::now();
    loop {
        if let Some(_st) = child.try_wait().unwrap() {
            let o = child.wait_with_output().unwrap();
            return Run {
                code: o.status.code(),
                stdout: String::from_utf8_lossy(&o.stdout).into(),
                stderr: String::from_utf8_lossy(&o.stderr).into(),
            };
        }
        if t0.elapsed() > limit {
            child.kill().ok();
            let o = child.wait_with_output().unwrap();
            panic!(
                "mxmoe {args:?} hung: still running after {limit:?}; stderr so far: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Run {
    run_for(args, Duration::from_secs(120))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A clean refusal: exit code 1 (not 101 = panic, not 134 = abort), an `error:` line holding
/// every needle, no panic text, and `out` (if given) absent.
fn refused(r: &Run, needles: &[&str], out: Option<&Path>) {
    assert_eq!(
        r.code,
        Some(1),
        "expected exit 1 (a clean error); got {:?}\nstderr: {}",
        r.code,
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "panic: {}", r.stderr);
    assert!(r.stderr.contains("error:"), "no error line: {}", r.stderr);
    for n in needles {
        assert!(r.stderr.contains(n), "stderr lacks '{n}': {}", r.stderr);
    }
    if let Some(o) = out {
        assert!(!o.exists(), "{} was written", o.display());
    }
}

/// A safetensors file with a hand-written JSON header (so it can say what `io::save` never
/// would: duplicate keys) and `data`.
fn raw_file(path: &Path, header: &str, data: &[u8]) {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend(h);
    b.extend(data);
    std::fs::write(path, b).unwrap();
}

/// A small layer bundle (4 experts, H = I = 32, top-2) and a batch of 3 tokens.
fn small_layer(d: &Path) -> (PathBuf, PathBuf) {
    let spec = SynthSpec::new(Scheme::OCP_MX[0], 4, 32, 32, 2);
    let sl = synth_layer(&spec).unwrap();
    let layer = d.join("layer.safetensors");
    io::save_layer(&layer, &sl.layer, None).unwrap();
    let (hidden, logits) = synth_batch(3, 32, 4, 1);
    let batch = d.join("batch.safetensors");
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

/// Copy of the layer file at `src` with metadata patched, tensors replaced or added (by name)
/// and tensors dropped.
fn patched(src: &Path, dst: &Path, meta: &[(&str, &str)], put: Vec<OutTensor>, drop: &[&str]) {
    let f = StFile::open(src).unwrap();
    let mut ts = Vec::new();
    for n in f.names() {
        if drop.contains(&n.as_str()) || put.iter().any(|t| t.name == n) {
            continue;
        }
        let sh = f.shape(&n).unwrap();
        ts.push(match f.dtype(&n).unwrap() {
            safetensors::Dtype::U8 => OutTensor::u8(n.clone(), sh, &f.bytes_u8(&n).unwrap().0),
            safetensors::Dtype::I32 | safetensors::Dtype::I64 => {
                let v: Vec<i32> = f.ints(&n).unwrap().0.iter().map(|&x| x as i32).collect();
                OutTensor::i32(n.clone(), sh, &v)
            }
            _ => OutTensor::f32(n.clone(), sh, &f.floats(&n).unwrap().0),
        });
    }
    ts.extend(put);
    let mut m = f.metadata().clone();
    for (k, v) in meta {
        m.insert(k.to_string(), v.to_string());
    }
    io::save(dst, &ts, m).unwrap();
}

fn moe_args<'a>(layer: &'a Path, batch: &'a Path, out: &'a Path) -> Vec<&'a str> {
    vec![
        "moe",
        "--layer",
        s(layer),
        "--input",
        s(batch),
        "--output",
        s(out),
    ]
}

// ---------------------------------------------------------------------------------------------
// Panics (exit 101)

/// A file with float tensors `x` and `x_scale`: quantizing writes `x` + `x_scale` (its scales)
/// and `x_scale` + `x_scale_scale`, one name twice; the safetensors serializer panicked on it.
#[test]
fn quantize_of_x_and_x_scale_is_refused_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let inp = d.path().join("xs.safetensors");
    let v = vec![1.0f32; 64];
    io::save(
        &inp,
        &[
            OutTensor::f32("x", vec![2, 32], &v),
            OutTensor::f32("x_scale", vec![2, 32], &v),
        ],
        HashMap::new(),
    )
    .unwrap();
    let out = d.path().join("q.safetensors");
    let r = run(&[
        "quantize",
        "--format",
        "mxfp4",
        "--input",
        s(&inp),
        "--output",
        s(&out),
    ]);
    refused(&r, &["xs.safetensors", "'x'", "'x_scale'"], Some(&out));
    // The library's writer refuses a repeated name too (instead of the serializer's panic).
    let e = io::save(
        &out,
        &[
            OutTensor::f32("a", vec![1], &[1.0]),
            OutTensor::f32("a", vec![1], &[2.0]),
        ],
        HashMap::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("tensor 'a' given twice"), "{e}");
    assert!(!out.exists());
}

/// An `expert_map` marking every expert non-local: as a file it contradicts the weights it
/// holds (refused, naming the tensor); as a library layer it runs on every backend and gives
/// zeros (no expert of this rank is chosen).
#[test]
fn expert_map_with_every_expert_non_local() {
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let l2 = d.path().join("nonlocal.safetensors");
    patched(
        &layer,
        &l2,
        &[],
        vec![OutTensor::i32("expert_map", vec![4], &[-1, -1, -1, -1])],
        &[],
    );
    let out = d.path().join("out.safetensors");
    let r = run(&moe_args(&l2, &batch, &out));
    refused(
        &r,
        &[
            "nonlocal.safetensors",
            "'expert_map'",
            "maps 0 global experts",
            "hold 4 local",
        ],
        Some(&out),
    );

    use mxmoe::backend::{Backend, BackendKind};
    let spec = SynthSpec::new(Scheme::OCP_MX[0], 4, 32, 32, 2);
    let mut l = synth_layer(&spec).unwrap().layer;
    l.weights.expert_map = Some(vec![-1; 4]);
    let (h, lg) = synth_batch(70, 32, 4, 3); // 70 tokens: the GEMM path on wgpu too
    let opts = mxmoe::moe::MoeOptions {
        accumulate: mxmoe::moe::Accumulate::F32,
        ..Default::default()
    };
    for kind in [BackendKind::Cpu, BackendKind::Wgpu] {
        let b = match Backend::open(kind, None) {
            Ok(b) => b,
            Err(e) if kind == BackendKind::Wgpu && !mxmoe::check::require_gpu() => {
                eprintln!("SKIPPED wgpu part: {e}");
                continue;
            }
            Err(e) => panic!("{kind:?}: {e}"),
        };
        for m in [1usize, 70] {
            let o = b
                .moe_once(&l, &h[..m * 32], &lg[..m * 4], opts)
                .unwrap_or_else(|e| panic!("{kind:?} M = {m}: {e}"));
            assert!(
                o.output.iter().all(|&v| v == 0.0),
                "{kind:?} M = {m}: non-local experts contributed"
            );
        }
    }
}

/// wgpu layer sizes near 2^40 or past u32 offsets: refused with the numbers before anything is
/// allocated (the CLI once aborted building such a layer; the shaders' u32 parameters wrapped).
#[test]
fn wgpu_sizes_past_u32_and_memory_are_refused() {
    use mxmoe::backend::wgpu::moe::check_layer_sizes;
    use mxmoe::moe::{Activation, MoeConfig, RouterConfig};
    let cfg = |h: usize, i: usize| MoeConfig {
        scheme: Scheme::OCP_MX[0],
        activation: Activation::Silu,
        router: RouterConfig::default(),
        act_scale_mode: Default::default(),
        n_experts: 8,
        local_experts: 8,
        hidden: h,
        inter: i,
    };
    let limit = 128 << 20;
    // I = 2^40: does not fit the u32 parameters.
    let e = check_layer_sizes(&cfg(2880, 1 << 40), limit, "test").unwrap_err();
    assert!(e.to_string().contains("1099511627776"), "{e}");
    // I = 2^32 + 32: would wrap to 32 as a u32.
    let e = check_layer_sizes(&cfg(32, (1 << 32) + 32), limit, "test").unwrap_err();
    assert!(e.to_string().contains("4294967328"), "{e}");
    // One expert's w13 of 2^32 bytes (2^16 rows of 2^17 FP4 values): past u32 byte offsets.
    let e = check_layer_sizes(&cfg(1 << 17, 1 << 15), u64::MAX, "test").unwrap_err();
    assert!(e.to_string().contains("4294967295 bytes"), "{e}");
    // H = I = 2^31 (each fits u32): one expert is 2^62 bytes, refused with the sizes.
    let e = check_layer_sizes(&cfg(1 << 31, 1 << 31), u64::MAX, "test").unwrap_err();
    assert!(e.to_string().contains("H 2147483648, I 2147483648"), "{e}");
    // A real shape passes.
    check_layer_sizes(&cfg(2880, 2880), limit, "test").unwrap();

    // Through the CLI: a bench layer with I = 2^40 is refused before it is built.
    let r = run(&[
        "bench",
        "--backend",
        "cpu",
        "--shape",
        "custom",
        "--experts",
        "2",
        "--hidden",
        "32",
        "--inter",
        "1099511627776",
        "--top-k",
        "1",
        "--tokens",
        "1",
        "--iters",
        "1",
    ]);
    refused(&r, &["I 1099511627776", "bytes"], None);
}

// ---------------------------------------------------------------------------------------------
// Aborts (exit 134, allocation failure)

#[test]
fn gen_of_impossible_sizes_is_refused_with_the_numbers() {
    let d = tempfile::tempdir().unwrap();
    let (lo, bo) = (
        d.path().join("l.safetensors"),
        d.path().join("b.safetensors"),
    );
    let base = ["gen", "--layer-out", s(&lo), "--batch-out", s(&bo)];
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "--experts",
                "1000000000",
                "--hidden",
                "2880",
                "--inter",
                "2880",
            ],
            "1000000000 experts",
        ),
        (
            &["--hidden", "1099511627776", "--packed"],
            "H 1099511627776",
        ),
        (&["--tokens", "1000000000000"], "1000000000000 tokens"),
    ];
    for (extra, needle) in cases {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let r = run(&a);
        refused(&r, &[needle, "bytes"], Some(&lo));
        assert!(!bo.exists());
    }
    // Against the memory available (here a 1 MB budget): a modest layer is refused, with the
    // budget and where it comes from.
    let r = bin()
        .args(["gen", "--experts", "8", "--hidden", "256", "--inter", "256"])
        .args(["--layer-out", s(&lo), "--batch-out", s(&bo)])
        .env("MXMOE_MEMORY_LIMIT", "1000000")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("1000000 bytes) of memory is available (MXMOE_MEMORY_LIMIT)"),
        "{err}"
    );
    assert!(!lo.exists() && !bo.exists());
}

// ---------------------------------------------------------------------------------------------
// Hangs

/// A FIFO as input: reading it would block forever; refused without opening it.
#[cfg(unix)]
#[test]
fn fifo_input_is_refused_not_a_hang() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pipe.safetensors");
    let ok = Command::new("mkfifo").arg(&fifo).status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: mkfifo is not available");
        return;
    }
    let out = d.path().join("out.safetensors");
    let (layer, batch) = small_layer(d.path());
    let limit = Duration::from_secs(30);
    let r = run_for(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(&fifo),
            "--output",
            s(&out),
        ],
        limit,
    );
    refused(&r, &["pipe.safetensors", "FIFO", "regular"], Some(&out));
    let r = run_for(&moe_args(&layer, &fifo, &out), limit);
    refused(&r, &["pipe.safetensors", "FIFO"], Some(&out));
    // As a layer (the model loader first asks whether it is a GGUF file: without opening it).
    let r = run_for(&moe_args(&fifo, &batch, &out), limit);
    refused(&r, &["pipe.safetensors", "FIFO"], Some(&out));
    let r = run_for(&["layers", s(&fifo)], limit);
    refused(&r, &["pipe.safetensors", "FIFO"], None);
    // A directory is not a batch file either (as --layer it is a model directory).
    let r = run_for(&moe_args(&layer, d.path(), &out), limit);
    refused(&r, &["directory"], Some(&out));
}

/// 20,000 tensors: every accessor used to re-parse the whole header (quadratic: 4,000 tensors
/// took > 30 s). A hang guard with a wide margin, not a speed claim: linear work finishes in a
/// few seconds; the quadratic step took minutes at this size.
#[test]
fn files_with_many_tensors_load_in_linear_time() {
    let d = tempfile::tempdir().unwrap();
    let inp = d.path().join("many.safetensors");
    let n = 20_000;
    let v = [0.5f32; 32];
    let ts: Vec<OutTensor> = (0..n)
        .map(|i| OutTensor::f32(format!("t{i:05}"), vec![1, 32], &v))
        .collect();
    io::save(&inp, &ts, HashMap::new()).unwrap();
    let out = d.path().join("q.safetensors");
    let r = run_for(
        &[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(&inp),
            "--output",
            s(&out),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let deq = d.path().join("dq.safetensors");
    let r = run_for(
        &["dequantize", "--input", s(&out), "--output", s(&deq)],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let f = StFile::open(&deq).unwrap();
    assert_eq!(f.names().len(), n);
    assert_eq!(f.floats("t12345").unwrap().0, vec![0.5f32; 32]);
}

// ---------------------------------------------------------------------------------------------
// Data loss

/// `--output` naming an input (the same path, another spelling, a symlink) is refused and the
/// input is untouched.
#[test]
fn output_that_is_an_input_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let before = std::fs::read(&layer).unwrap();
    let dotted = d.path().join(".").join("layer.safetensors");
    let r = run(&moe_args(&layer, &batch, &layer));
    refused(&r, &["--output is the same file as --layer"], None);
    let r = run(&moe_args(&layer, &batch, &dotted));
    refused(&r, &["same file as --layer"], None);
    let r = run(&moe_args(&layer, &batch, &batch));
    refused(&r, &["same file as --input"], None);
    #[cfg(unix)]
    {
        let link = d.path().join("link.safetensors");
        std::os::unix::fs::symlink(&batch, &link).unwrap();
        let r = run(&moe_args(&layer, &batch, &link));
        refused(&r, &["same file as --input"], None);
    }
    assert_eq!(
        std::fs::read(&layer).unwrap(),
        before,
        "the layer was modified"
    );
    // The other writers: quantize, qdq, dequantize, gen, verify --json, check --json/--junit.
    let w = d.path().join("w.safetensors");
    io::save(
        &w,
        &[OutTensor::f32("w", vec![1, 32], &[1.0; 32])],
        HashMap::new(),
    )
    .unwrap();
    for cmd in ["quantize", "qdq"] {
        let r = run(&[
            cmd,
            "--format",
            "mxfp4",
            "--input",
            s(&w),
            "--output",
            s(&w),
        ]);
        refused(&r, &["same file as --input"], None);
    }
    let r = run(&["dequantize", "--input", s(&w), "--output", s(&w)]);
    refused(&r, &["same file as --input"], None);
    let r = run(&["gen", "--layer-out", s(&w), "--batch-out", s(&w)]);
    refused(&r, &["same file"], None);
    let r = run(&[
        "verify",
        "--layer",
        s(&layer),
        "--input",
        s(&batch),
        "--result",
        s(&batch),
        "--json",
        s(&layer),
    ]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("same file as --layer"), "{}", r.stderr);
    let j = d.path().join("c.json");
    let r = run(&[
        "check",
        "--backend",
        "cpu",
        "--filter",
        "qdq/mxfp4/even/special",
        "--json",
        s(&j),
        "--junit",
        s(&j),
    ]);
    refused(&r, &["same file"], Some(&j));
    assert_eq!(std::fs::read(&layer).unwrap(), before);
}

/// A failed run never touches an existing output and leaves no partial one: `gen` writes its
/// two files both or neither; a quantize that fails keeps the old output.
#[test]
fn failed_runs_leave_existing_outputs_untouched() {
    let d = tempfile::tempdir().unwrap();
    let old = b"an earlier result".to_vec();
    let lo = d.path().join("layer.safetensors");
    std::fs::write(&lo, &old).unwrap();
    // gen: the batch goes to a folder that does not exist, after the layer was built.
    let bo = d.path().join("missing/batch.safetensors");
    let r = run(&[
        "gen",
        "--experts",
        "4",
        "--hidden",
        "32",
        "--inter",
        "32",
        "--layer-out",
        s(&lo),
        "--batch-out",
        s(&bo),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        std::fs::read(&lo).unwrap(),
        old,
        "gen replaced the layer output"
    );
    // quantize of a tensor whose last dimension is not a multiple of 32.
    let bad = d.path().join("bad.safetensors");
    io::save(
        &bad,
        &[OutTensor::f32("w", vec![1, 33], &[1.0; 33])],
        HashMap::new(),
    )
    .unwrap();
    let out = d.path().join("q.safetensors");
    std::fs::write(&out, &old).unwrap();
    let r = run(&[
        "quantize",
        "--format",
        "mxfp4",
        "--input",
        s(&bad),
        "--output",
        s(&out),
    ]);
    refused(&r, &["bad.safetensors", "'w'"], None);
    assert_eq!(std::fs::read(&out).unwrap(), old);
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

// ---------------------------------------------------------------------------------------------
// Silently accepted

/// Duplicate keys in a safetensors header are invalid (one entry per name); the crate kept the
/// last one silently.
#[test]
fn duplicate_header_keys_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let data: Vec<u8> = [1.0f32; 64].iter().flat_map(|v| v.to_le_bytes()).collect();
    let dup_tensor = d.path().join("dup.safetensors");
    raw_file(
        &dup_tensor,
        r#"{"w":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]},"w":{"dtype":"F32","shape":[1,32],"data_offsets":[128,256]}}"#,
        &data,
    );
    let out = d.path().join("q.safetensors");
    let r = run(&[
        "quantize",
        "--format",
        "mxfp4",
        "--input",
        s(&dup_tensor),
        "--output",
        s(&out),
    ]);
    refused(&r, &["dup.safetensors", "duplicate key 'w'"], Some(&out));
    let dup_meta = d.path().join("dupmeta.safetensors");
    raw_file(
        &dup_meta,
        r#"{"__metadata__":{"format":"mxfp4","format":"mxfp8_e4m3"},"w":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]}}"#,
        &data[..128],
    );
    let r = run(&[
        "quantize",
        "--format",
        "mxfp4",
        "--input",
        s(&dup_meta),
        "--output",
        s(&out),
    ]);
    refused(
        &r,
        &[
            "dupmeta.safetensors",
            "duplicate key 'format'",
            "__metadata__",
        ],
        Some(&out),
    );
}

/// Routing keys and tables a layer may not have: refused, naming the file and the key.
#[test]
fn invalid_routing_keys_and_tables_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let out = d.path().join("out.safetensors");
    let l = d.path().join("bad.safetensors");
    for f in ["-1", "0", "NaN", "inf"] {
        patched(&layer, &l, &[("routed_scaling_factor", f)], vec![], &[]);
        let r = run(&moe_args(&l, &batch, &out));
        refused(
            &r,
            &["bad.safetensors", "routed_scaling_factor", "> 0"],
            Some(&out),
        );
    }
    // expert_map: two global ids on one local expert.
    patched(
        &layer,
        &l,
        &[],
        vec![OutTensor::i32("expert_map", vec![4], &[0, 1, 1, 2])],
        &[],
    );
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "bad.safetensors",
            "'expert_map'",
            "1 and 2 both map to local expert 1",
        ],
        Some(&out),
    );
    // expert_map with 8 entries while the metadata says 4 experts.
    patched(
        &layer,
        &l,
        &[],
        vec![OutTensor::i32(
            "expert_map",
            vec![8],
            &[0, 1, 2, 3, -1, -1, -1, -1],
        )],
        &[],
    );
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &["bad.safetensors", "'n_experts'", "says 4", "8 entries"],
        Some(&out),
    );
    // NaN in e_score_correction_bias.
    patched(
        &layer,
        &l,
        &[("scoring", "sigmoid")],
        vec![OutTensor::f32(
            "e_score_correction_bias",
            vec![4],
            &[0.0, f32::NAN, 0.0, 0.0],
        )],
        &[],
    );
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "bad.safetensors",
            "e_score_correction_bias",
            "entry 1 is NaN",
        ],
        Some(&out),
    );
}

/// NaN weight blocks (scale byte 0xFF) and non-finite biases are legal data but almost
/// certainly a broken checkpoint: the layer runs, a warning names tensor, expert and count, and
/// the result's metadata records it.
#[test]
fn broken_but_legal_data_runs_with_a_recorded_warning() {
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let f = StFile::open(&layer).unwrap();
    let (mut sc, shape) = f.bytes_u8("w13_weight_scale").unwrap();
    // Expert 1 (of 4): 3 NaN blocks.
    let per = sc.len() / 4;
    for b in &mut sc[per..per + 3] {
        *b = 0xFF;
    }
    let mut b2 = vec![0.0f32; 4 * 32];
    b2[2 * 32 + 5] = f32::INFINITY; // expert 2
    let l = d.path().join("nan.safetensors");
    patched(
        &layer,
        &l,
        &[],
        vec![
            OutTensor::u8("w13_weight_scale", shape, &sc),
            OutTensor::f32("w2_bias", vec![4, 32], &b2),
        ],
        &[],
    );
    let out = d.path().join("out.safetensors");
    let r = run(&moe_args(&l, &batch, &out));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    for n in [
        "warning: ",
        "w13_weight_scale: 3 NaN blocks (scale byte 0xFF) in 1 expert(s): expert 1 (3)",
        "w2_bias: 1 non-finite values (NaN or Inf) in 1 expert(s): expert 2 (1)",
    ] {
        assert!(r.stderr.contains(n), "stderr lacks '{n}': {}", r.stderr);
    }
    let res = StFile::open(&out).unwrap();
    let w = res
        .meta("warnings")
        .expect("warnings recorded in the result");
    assert!(
        w.contains("w13_weight_scale") && w.contains("expert 1 (3)"),
        "{w}"
    );
    assert!(w.contains("w2_bias") && w.contains("expert 2 (1)"), "{w}");
    // A clean layer records none.
    let r = run(&moe_args(&layer, &batch, &out));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    assert!(StFile::open(&out).unwrap().meta("warnings").is_none());
}

// ---------------------------------------------------------------------------------------------
// Unclear messages

/// Loader errors name the file, the tensor or key, and what was expected vs found.
#[test]
fn loader_errors_name_file_tensor_expected_and_found() {
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let out = d.path().join("out.safetensors");
    let l = d.path().join("shape.safetensors");
    patched(
        &layer,
        &l,
        &[],
        vec![OutTensor::f32("w13_bias", vec![4, 63], &[0.0; 4 * 63])],
        &[],
    );
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "shape.safetensors",
            "'w13_bias'",
            "[4, 63]",
            "expected [4, 64]",
        ],
        Some(&out),
    );
    patched(
        &layer,
        &l,
        &[],
        vec![OutTensor::f32(
            "w2_weight_scale",
            vec![4, 32, 1],
            &[0.0; 128],
        )],
        &[],
    );
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "shape.safetensors",
            "'w2_weight_scale'",
            "dtype F32",
            "expected U8",
        ],
        Some(&out),
    );
    patched(&layer, &l, &[("top_k", "9")], vec![], &[]);
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &["shape.safetensors", "top_k = 9", "[1, 4]"],
        Some(&out),
    );
    patched(&layer, &l, &[], vec![], &["w2_weight"]);
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "shape.safetensors",
            "no MoE layer found",
            "w2_weight_scale",
            "Conventions tried",
        ],
        Some(&out),
    );
    patched(&layer, &l, &[], vec![], &["w2_weight_scale"]);
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "shape.safetensors",
            "missing tensor 'w2_weight_scale'",
            "the file has:",
        ],
        Some(&out),
    );
    // No experts: the shape found and what was expected (was: "w13_weight holds 0 experts,
    // the configuration says 0"; `MoeLayer::validate` now says the shape too).
    let f = StFile::open(&layer).unwrap();
    let mut empty = Vec::new();
    for n in [
        "w13_weight",
        "w13_weight_scale",
        "w2_weight",
        "w2_weight_scale",
    ] {
        let mut sh = f.shape(n).unwrap();
        sh[0] = 0;
        empty.push(OutTensor::u8(n, sh, &[]));
    }
    patched(&layer, &l, &[], empty, &[]);
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "shape.safetensors",
            "'w13_weight_scale' has shape [0, 64, 1]",
            "E >= 1",
        ],
        Some(&out),
    );
    // A missing tensor in a file of many: the names listed are bounded, with the count (was:
    // every one of thousands of names on one line).
    let extra: Vec<OutTensor> = (0..500)
        .map(|i| OutTensor::f32(format!("extra.{i:03}"), vec![1], &[0.0]))
        .collect();
    patched(&layer, &l, &[], extra, &["w2_weight_scale"]);
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &[
            "shape.safetensors",
            "missing tensor 'w2_weight_scale'",
            "w2_weight, ",
            "(503 tensors in all)",
        ],
        Some(&out),
    );
    assert!(
        r.stderr.len() < 2000,
        "a wall of names: {} bytes",
        r.stderr.len()
    );
    // Truncated data: the crate's message, with the file.
    let bytes = std::fs::read(&layer).unwrap();
    std::fs::write(&l, &bytes[..bytes.len() - 100]).unwrap();
    let r = run(&moe_args(&l, &batch, &out));
    refused(
        &r,
        &["shape.safetensors", "not a valid safetensors file"],
        Some(&out),
    );
}

// ---------------------------------------------------------------------------------------------
// CI-friendly answers

/// A backend named explicitly that cannot be opened fails the run (it was SKIPPED, exit 0).
#[test]
fn check_fails_when_a_named_backend_is_unavailable() {
    let d = tempfile::tempdir().unwrap();
    let j = d.path().join("c.json");
    let r = run(&["check", "--backend", "hip", "--json", s(&j)]);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("hip: FAIL") && r.stderr.contains("named explicitly"),
        "{}",
        r.stderr
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    assert_eq!(v["backends"][0]["status"], "FAIL");
    assert_eq!(v["totals"]["backends_failed_to_open"], 1);
}

/// `--backend all` lists a missing backend with its reason; `--require` makes it a failure;
/// `--junit` writes JUnit XML and `--json` carries totals.
#[test]
fn check_require_junit_and_json_totals() {
    let d = tempfile::tempdir().unwrap();
    let (j, x) = (d.path().join("c.json"), d.path().join("c.xml"));
    let filter = "qdq/mxfp4/even/special";
    let base = [
        "check",
        "--backend",
        "all",
        "--filter",
        filter,
        "--json",
        s(&j),
        "--junit",
        s(&x),
    ];
    let r = run(&base);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    // Without the feature the HIP backend is not compiled in; with it (CI builds it) and no
    // HIP-capable GPU, it is unavailable with the reason.
    let hip_why = if cfg!(feature = "hip") {
        "backend &apos;hip&apos; is unavailable"
    } else {
        "backend &apos;hip&apos; is not compiled in"
    };
    assert!(
        r.stdout.contains(&format!(
            "== hip: missing, skipped: {}",
            hip_why.replace("&apos;", "'")
        )),
        "{}",
        r.stdout
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let t = &v["totals"];
    let run_backends = t["backends_run"].as_u64().unwrap();
    assert!(run_backends >= 1);
    assert_eq!(t["cases"].as_u64().unwrap(), run_backends);
    assert_eq!(t["passed"], t["cases"]);
    assert_eq!(t["failed"], 0);
    assert_eq!(t["backends_missing"].as_u64().unwrap(), 3 - run_backends);
    assert_eq!(v["suite"], "quick");
    let xml = std::fs::read_to_string(&x).unwrap();
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"),
        "{xml}"
    );
    assert!(
        xml.contains(&format!("<testcase classname=\"cpu\" name=\"{filter}\"")),
        "{xml}"
    );
    assert!(
        xml.contains("<testsuite name=\"hip\" tests=\"1\" failures=\"0\" skipped=\"1\""),
        "{xml}"
    );
    assert!(
        xml.contains(&format!("<skipped message=\"{hip_why}")),
        "{xml}"
    );
    assert_eq!(xml.matches("<testsuite ").count(), 3);
    assert_eq!(xml.matches("</testsuite>").count(), 3);

    let mut req = base.to_vec();
    req.extend(["--require", "wgpu,hip"]);
    let r = run(&req);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("hip: FAIL") && r.stderr.contains("--require hip"),
        "{}",
        r.stderr
    );
    let xml = std::fs::read_to_string(&x).unwrap();
    assert!(
        xml.contains("<testsuite name=\"hip\" tests=\"1\" failures=\"1\" skipped=\"0\""),
        "{xml}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    assert!(v["totals"]["backends_failed_to_open"].as_u64().unwrap() >= 1);
    let r = run(&["check", "--backend", "cpu", "--require", "wgpu"]);
    refused(&r, &["--require wgpu", "does not run wgpu"], None);
    let r = run(&["check", "--backend", "all", "--require", "tpu"]);
    refused(&r, &["--require", "'tpu' is not a backend"], None);
}

/// A wgpu run never reports f64 accumulation (it accumulates in f32); f64 asked of it is an
/// error; the CPU keeps f64 by default.
#[test]
fn accumulation_labels_tell_the_truth() {
    let d = tempfile::tempdir().unwrap();
    let (layer, batch) = small_layer(d.path());
    let out = d.path().join("out.safetensors");
    let mut a = moe_args(&layer, &batch, &out);
    a.extend(["--backend", "cpu"]);
    let r = run(&a);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("f64 accumulation"), "{}", r.stderr);
    assert_eq!(StFile::open(&out).unwrap().meta("accumulate"), Some("f64"));
    if mxmoe::backend::Backend::open(mxmoe::backend::BackendKind::Wgpu, None).is_err()
        && !mxmoe::check::require_gpu()
    {
        eprintln!("SKIPPED wgpu part: no adapter");
        return;
    }
    let mut a = moe_args(&layer, &batch, &out);
    a.extend(["--backend", "wgpu"]);
    let r = run(&a);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("f32 accumulation"), "{}", r.stderr);
    assert!(!r.stderr.to_lowercase().contains("f64"), "{}", r.stderr);
    assert_eq!(StFile::open(&out).unwrap().meta("accumulate"), Some("f32"));
    a.extend(["--accumulate", "f64"]);
    let r = run(&a);
    refused(&r, &["--accumulate f64", "wgpu accumulates in f32"], None);
}

/// `bench` says which bandwidth its floor assumes and records it.
#[test]
fn bench_names_the_bandwidth_of_its_floor() {
    let d = tempfile::tempdir().unwrap();
    let j = d.path().join("b.json");
    let args = [
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
        "1",
        "--iters",
        "1",
        "--json",
        s(&j),
    ];
    let r = run(&args);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // The default floor: this machine's copy bandwidth, measured, and said so.
    assert!(
        r.stdout
            .contains("floor: packed bytes of the touched experts / ")
            && r.stdout
                .contains("GB/s (measured on this machine: a host memory copy"),
        "{}",
        r.stdout
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let g = v[0]["floor_gbps"].as_f64().unwrap();
    assert!(g.is_finite() && g > 0.1 && g != 4550.0, "floor_gbps {g}");
    assert!(
        v[0]["floor_source"]
            .as_str()
            .unwrap()
            .starts_with("measured on this machine"),
        "{}",
        v[0]
    );
    // The floor's ratio is the GPU (here wall) time over bytes / that bandwidth.
    let want = v[0]["weight_bytes"].as_f64().unwrap() / (g * 1e9) * 1e3;
    let floor_ms = v[0]["floor_ms"].as_f64().unwrap();
    assert!(
        (floor_ms - want).abs() <= 1e-9 * want.max(1.0),
        "{floor_ms} vs {want}"
    );
    let mut a = args.to_vec();
    a.extend(["--hbm-gbps", "1000"]);
    let r = run(&a);
    assert!(
        r.stdout.contains("/ 1000 GB/s (from --hbm-gbps)"),
        "{}",
        r.stdout
    );
    // A bad value is a usage error (clap's exit 2), saying what is accepted.
    for bad in ["0", "-5", "inf", "fast"] {
        let flag = format!("--hbm-gbps={bad}");
        let mut a = args.to_vec();
        a.push(&flag);
        let r = run(&a);
        assert_eq!(r.code, Some(2), "{bad}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        for n in [
            "--hbm-gbps",
            bad,
            "neither a positive bandwidth in GB/s nor `measure`",
        ] {
            assert!(
                r.stderr.contains(n),
                "{bad}: stderr lacks '{n}': {}",
                r.stderr
            );
        }
    }
}
