//! `--profile` through the CLI, end to end against the peers' committed vectors (xref/vectors/,
//! written by the real implementations): `quantize --profile ggml` writes gguf-py's bytes in its
//! split nibble order, `dequantize` reads the profile back from the file, `qdq --profile quark`
//! and `--profile torchao` give the peers' values; bad combinations fail with clear errors.

use mxmoe::io::{self, OutTensor, StFile};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mxmoe"))
        .args(args)
        .output()
        .expect("spawn mxmoe");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn vectors(name: &str) -> StFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("xref/vectors")
        .join(name);
    StFile::open(&p).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

#[test]
fn ggml_quantize_and_dequantize_match_gguf_py() {
    let v = vectors("ggml.safetensors");
    let (x, _) = v.floats("input").unwrap();
    let (blocks, _) = v.bytes_u8("blocks").unwrap();
    let (deq, _) = v.floats("dequant").unwrap();
    let (defined, _) = v.bytes_u8("defined").unwrap();
    // The blocks where ggml is defined, as one [n, 32] tensor.
    let keep: Vec<usize> = (0..defined.len()).filter(|&i| defined[i] == 1).collect();
    let xs: Vec<f32> = keep
        .iter()
        .flat_map(|&i| x[i * 32..(i + 1) * 32].to_vec())
        .collect();
    let d = tempfile::tempdir().unwrap();
    let inp = d.path().join("x.safetensors");
    io::save(
        &inp,
        &[OutTensor::f32("w", vec![keep.len(), 32], &xs)],
        HashMap::new(),
    )
    .unwrap();
    let q = d.path().join("q.safetensors");
    let (ok, err) = run(&[
        "quantize",
        "--profile",
        "ggml",
        "--format",
        "mxfp4",
        "--input",
        s(&inp),
        "--output",
        s(&q),
    ]);
    assert!(ok, "{err}");
    let f = StFile::open(&q).unwrap();
    assert_eq!(f.meta("profile"), Some("ggml"));
    let (data, _) = f.bytes_u8("w").unwrap();
    let (scales, _) = f.bytes_u8("w_scale").unwrap();
    for (n, &i) in keep.iter().enumerate() {
        assert_eq!(scales[n], blocks[i * 17], "block {i}: e");
        assert_eq!(
            &data[n * 16..(n + 1) * 16],
            &blocks[i * 17 + 1..(i + 1) * 17],
            "block {i}: qs"
        );
    }
    let o = d.path().join("d.safetensors");
    let (ok, err) = run(&["dequantize", "--input", s(&q), "--output", s(&o)]);
    assert!(ok, "{err}");
    let (got, _) = StFile::open(&o).unwrap().floats("w").unwrap();
    let want: Vec<f32> = keep
        .iter()
        .flat_map(|&i| deq[i * 32..(i + 1) * 32].to_vec())
        .collect();
    assert!(
        same(&got, &want),
        "dequantize of the ggml file differs from gguf-py"
    );
    // Read as the contract's linear order, the same bytes give other values.
    let (ok, _) = run(&[
        "dequantize",
        "--profile",
        "contract",
        "--input",
        s(&q),
        "--output",
        s(&o),
    ]);
    assert!(ok);
    let (lin, _) = StFile::open(&o).unwrap().floats("w").unwrap();
    assert!(!same(&lin, &want));
}

#[test]
fn qdq_profiles_match_quark_and_torchao() {
    let d = tempfile::tempdir().unwrap();
    for (file, profile, fmt, mode, key) in [
        (
            "quark.safetensors",
            "quark",
            "mxfp4",
            "even",
            "mxfp4.even.qdq",
        ),
        (
            "quark.safetensors",
            "quark",
            "mxint8",
            "floor",
            "mxint8.floor.qdq",
        ),
        (
            "torchao.safetensors",
            "torchao",
            "mxfp6_e3m2",
            "rceil",
            "mxfp6_e3m2.rceil.dequant",
        ),
    ] {
        let v = vectors(file);
        let (x, shape) = v.floats(&format!("{fmt}.input")).unwrap();
        let (want, _) = v.floats(key).unwrap();
        let inp = d.path().join("x.safetensors");
        io::save(&inp, &[OutTensor::f32("a", shape, &x)], HashMap::new()).unwrap();
        let out = d.path().join("y.safetensors");
        let (ok, err) = run(&[
            "qdq",
            "--profile",
            profile,
            "--format",
            fmt,
            "--scale-mode",
            mode,
            "--input",
            s(&inp),
            "--output",
            s(&out),
        ]);
        assert!(ok, "{err}");
        let f = StFile::open(&out).unwrap();
        assert_eq!(f.meta("profile"), Some(profile));
        let (got, _) = f.floats("a").unwrap();
        assert!(
            same(&got, &want),
            "qdq --profile {profile} {fmt} {mode} differs from the peer"
        );
    }
}

#[test]
fn profile_errors_are_clear() {
    let d = tempfile::tempdir().unwrap();
    let inp = d.path().join("x.safetensors");
    io::save(
        &inp,
        &[OutTensor::f32("a", vec![1, 32], &[1.0; 32])],
        HashMap::new(),
    )
    .unwrap();
    let out = d.path().join("y.safetensors");
    for (args, needle) in [
        (
            vec!["qdq", "--profile", "ggml", "--format", "mxfp8_e4m3"],
            "has no mxfp8_e4m3",
        ),
        (
            vec![
                "qdq",
                "--profile",
                "quark",
                "--format",
                "mxfp4",
                "--scale-mode",
                "rceil",
            ],
            "no 'rceil' scale mode",
        ),
        (
            vec!["qdq", "--profile", "intel", "--format", "mxfp4"],
            "unknown profile 'intel'",
        ),
        (
            vec!["qdq", "--profile", "torchao", "--format", "mxint8"],
            "has no mxint8",
        ),
        (
            vec![
                "quantize",
                "--profile",
                "quark",
                "--format",
                "mxfp4",
                "--backend",
                "wgpu",
            ],
            "CPU reference only",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--input", s(&inp), "--output", s(&out)]);
        let (ok, err) = run(&a);
        assert!(!ok, "{a:?} succeeded");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{a:?}: {err}"
        );
        assert!(!out.exists());
    }
}
