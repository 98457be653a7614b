//! Smoke test of the real binary: start `mxmoe-viewer` under Xvfb, load a layer bundle and a
//! token batch from disk, wait until every view is computed, save a screenshot and exit 0.
//! A bad file must not crash it either: the error is shown in the window (the screenshot is
//! written) and the exit code is non-zero, so a script notices. A packed-only layer (no
//! unquantized weights, no batch) exports one PNG per view.
//!
//! Needs `Xvfb` (apt `xvfb`). Without it the test prints SKIPPED and passes locally, but fails
//! when `CI` is set, so CI cannot go green without having run it.

mod common;

use mxmoe::io::{save_batch, save_layer, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::scheme::Scheme;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Xvfb {
    child: Child,
    display: String,
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_xvfb() -> Option<Xvfb> {
    if Command::new("Xvfb")
        .arg("-help")
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        let msg = "SKIPPED: Xvfb not installed (apt-get install xvfb)";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}, and CI is set: the smoke test must run in CI");
        }
        eprintln!("{msg}");
        return None;
    }
    // A display number unlikely to collide with other runs on the same machine.
    for n in 0..20u32 {
        let d = 90 + (std::process::id() + n * 37) % 800;
        if Path::new(&format!("/tmp/.X11-unix/X{d}")).exists() {
            continue;
        }
        let child = Command::new("Xvfb")
            .args([
                format!(":{d}").as_str(),
                "-screen",
                "0",
                "1600x1000x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn Xvfb");
        let mut x = Xvfb {
            child,
            display: format!(":{d}"),
        };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if Path::new(&format!("/tmp/.X11-unix/X{d}")).exists() {
                return Some(x);
            }
            if let Ok(Some(_)) = x.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(x);
    }
    panic!("could not start Xvfb on any display");
}

fn run_viewer(display: &str, args: &[&str], limit: Duration) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mxmoe-viewer"))
        .args(args)
        .env("DISPLAY", display)
        .env_remove("WAYLAND_DISPLAY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mxmoe-viewer");
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            let log = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return (status.success(), log);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "mxmoe-viewer did not exit within {limit:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn binary_loads_files_under_xvfb_and_exits() {
    let Some(x) = start_xvfb() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut spec = SynthSpec::new(Scheme::OCP_MX[1], 8, 64, 64, 2);
    spec.seed = 3;
    let s = synth_layer(&spec).unwrap();
    let layer = dir.path().join("layer.safetensors");
    save_layer(&layer, &s.layer, Some((&s.w13_f32, &s.w2_f32))).unwrap();
    let (hidden, logits) = synth_batch(16, 64, 8, 3);
    let batch = dir.path().join("tokens.safetensors");
    save_batch(
        &batch,
        &TokenBatch {
            hidden,
            logits,
            m: 16,
            hidden_size: 64,
            n_experts: 8,
        },
    )
    .unwrap();
    let png = dir.path().join("shot.png");
    let t0 = Instant::now();
    let (ok, log) = run_viewer(
        &x.display,
        &[
            "--layer",
            layer.to_str().unwrap(),
            "--input",
            batch.to_str().unwrap(),
            "--tab",
            "weights",
            "--size",
            "1200x800",
            "--screenshot",
            png.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert!(ok, "mxmoe-viewer failed:\n{log}");
    let img = image::open(&png).expect("the screenshot is a PNG");
    assert!(
        img.width() >= 600 && img.height() >= 400,
        "screenshot is {}x{}",
        img.width(),
        img.height()
    );
    eprintln!(
        "viewer loaded files, computed every view and wrote {}x{} in {:.1} s",
        img.width(),
        img.height(),
        t0.elapsed().as_secs_f64()
    );

    // A layer without a token batch: a synthetic batch that fits the layer.
    let png1 = dir.path().join("layer-only.png");
    let (ok, log) = run_viewer(
        &x.display,
        &[
            "--layer",
            layer.to_str().unwrap(),
            "--tokens",
            "12",
            "--screenshot",
            png1.to_str().unwrap(),
            "--size",
            "900x500",
        ],
        Duration::from_secs(300),
    );
    assert!(ok, "mxmoe-viewer failed with --layer only:\n{log}");
    assert!(png1.exists());

    // A packed-only layer (what MXFP4 checkpoints are) without a batch: one PNG per view.
    let packed = dir.path().join("packed.safetensors");
    save_layer(&packed, &s.layer, None).unwrap();
    let tabs = dir.path().join("tabs");
    let (ok, log) = run_viewer(
        &x.display,
        &[
            "--layer",
            packed.to_str().unwrap(),
            "--tokens",
            "8",
            "--screenshot-tabs",
            tabs.to_str().unwrap(),
            "--size",
            "1100x800",
        ],
        Duration::from_secs(300),
    );
    assert!(ok, "mxmoe-viewer failed on a packed-only layer:\n{log}");
    let all = [
        "routing",
        "model",
        "weights",
        "activations",
        "schemes",
        "backends",
    ];
    for t in all {
        let p = tabs.join(format!("{t}.png"));
        let img = image::open(&p).unwrap_or_else(|e| panic!("{}: {e}\n{log}", p.display()));
        assert!(img.width() >= 600, "{t}: {}x{}", img.width(), img.height());
    }

    // A model directory (several MoE layers, router weights, no batch): layer 2 picked, one
    // PNG per view; the routing comes from the layer's gate.
    let model = dir.path().join("tiny-moe");
    common::write_model_dir(&model, 3, 8);
    let tabs = dir.path().join("model-tabs");
    let (ok, log) = run_viewer(
        &x.display,
        &[
            "--layer",
            model.to_str().unwrap(),
            "--layer-index",
            "2",
            "--tokens",
            "10",
            "--screenshot-tabs",
            tabs.to_str().unwrap(),
            "--size",
            "1100x800",
        ],
        Duration::from_secs(300),
    );
    assert!(ok, "mxmoe-viewer failed on a model directory:\n{log}");
    for t in all {
        let p = tabs.join(format!("{t}.png"));
        assert!(p.exists(), "no {}:\n{log}", p.display());
    }

    // A file that is not safetensors: the window shows the error, nothing panics, the
    // screenshot is written and the exit code says it failed.
    let bad = dir.path().join("bad.safetensors");
    std::fs::write(&bad, b"this is not a safetensors file").unwrap();
    let png2 = dir.path().join("bad.png");
    let (ok, log) = run_viewer(
        &x.display,
        &[
            "--layer",
            bad.to_str().unwrap(),
            "--screenshot",
            png2.to_str().unwrap(),
            "--size",
            "900x500",
        ],
        Duration::from_secs(120),
    );
    assert!(!ok, "mxmoe-viewer exited 0 on a bad file:\n{log}");
    assert!(
        log.contains("bad.safetensors"),
        "the error does not name the file:\n{log}"
    );
    assert!(!log.contains("panicked"), "panic on a bad file:\n{log}");
    assert!(png2.exists(), "no screenshot of the error:\n{log}");
}
