//! Issue 10's table, re-run through `mxmoe verify --json` on all five OCP MX schemes: each row is
//! a planted dump made by the project's own fault injection (`check::faults`), written as a
//! result file with its intermediates (`input_qdq_out`, `gemm1_out`, `act_out`,
//! `intermediate_qdq_out`, `gemm2_out`). Legitimate rows must match (exit 0) and name their
//! variant; faulty rows must mismatch (exit 1), name the planted fault first in `diagnosis`
//! (a tie at the same rel-L2 with the first counts: two scale modes can pick the same scales on a
//! batch) and name the stage where it acts (or the first later stage where its dump differs).
//! The JSON of every run is collected in target/verify_table.json for the record.

use mxmoe::check::faults::Fault;
use mxmoe::check::verify_stages::Stage;
use mxmoe::format::ScaleMode;
use mxmoe::io::{self, OutTensor, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::moe::{self, Intermediate, MoeLayer, MoeOptions, MoeOutput, StageTaps};
use mxmoe::scheme::Scheme;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// Write a result file: output, optionally the routing (in the given top-k order) and stages.
fn write(path: &Path, o: &MoeOutput, h: usize, routing: bool, stages: Option<&StageTaps>) {
    let m = o.output.len() / h;
    let k = o.routing.top_k;
    let mut t = vec![OutTensor::f32("output", vec![m, h], &o.output)];
    if routing {
        t.push(OutTensor::i32("topk_ids", vec![m, k], &o.routing.topk_ids));
        t.push(OutTensor::f32(
            "topk_weights",
            vec![m, k],
            &o.routing.topk_weights,
        ));
    }
    if let Some(st) = stages {
        for s in Stage::ALL {
            let v = match s {
                Stage::InputQdq => &st.input_q,
                Stage::Gemm1 => &st.gemm1,
                Stage::Act => &st.act,
                Stage::InterQdq => &st.inter_q,
                Stage::Gemm2 => &st.gemm2,
            };
            let rows = if s == Stage::InputQdq { m } else { m * k };
            t.push(OutTensor::f32(s.name(), vec![rows, v.len() / rows], v));
        }
    }
    io::save(path, &t, HashMap::new()).unwrap();
}

fn verify(
    d: &Path,
    layer: &Path,
    batch: &Path,
    res: &Path,
    extra: &[&str],
) -> (Option<i32>, Value, String) {
    let json = d.join("r.json");
    let _ = std::fs::remove_file(&json);
    let o = Command::new(env!("CARGO_BIN_EXE_mxmoe"))
        .args([
            "verify",
            "--layer",
            layer.to_str().unwrap(),
            "--input",
            batch.to_str().unwrap(),
        ])
        .args([
            "--result",
            res.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .args(extra)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    let j = std::fs::read_to_string(&json)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(Value::Null);
    (o.status.code(), j, out)
}

/// The planted faulty rows of the table (where applicable to the scheme), with the stage each
/// acts at.
fn faulty_rows(scheme: Scheme) -> Vec<(&'static str, Fault, &'static str)> {
    let fp4 = scheme.weight == mxmoe::format::MxFormat::Fp4E2M1;
    vec![
        (
            "activations QDQ'd with floor scales",
            Fault::ActivationScaleMode(ScaleMode::Floor),
            "input_qdq_out",
        ),
        (
            "intermediate QDQ skipped",
            Fault::IntermediateQdqMissing,
            "intermediate_qdq_out",
        ),
        ("input QDQ skipped", Fault::InputQdqMissing, "input_qdq_out"),
        (
            if fp4 {
                "FP4 nibbles swapped"
            } else {
                "FP6 bytes swapped"
            },
            if fp4 {
                Fault::Fp4NibblesSwapped
            } else {
                Fault::Fp6BytesSwapped
            },
            "gemm1_out",
        ),
        ("gate/up halves swapped", Fault::GateUpSwapped, "gemm1_out"),
        ("bf16 accumulation", Fault::Bf16Accumulation, "gemm1_out"),
        ("renormalize off", Fault::RenormalizeMissing, "gemm2_out"),
    ]
}

#[test]
fn the_issue_table_through_verify_json_on_every_ocp_mx_scheme() {
    let d = tempfile::tempdir().unwrap();
    let mut record = Vec::new();
    let mut fails = Vec::new();
    for scheme in Scheme::OCP_MX {
        let mut spec = SynthSpec::new(scheme, 8, 128, 64, 2);
        spec.bias = true;
        let layer: MoeLayer = synth_layer(&spec).unwrap().layer;
        assert!(
            layer.config.router.renormalize,
            "the table's renormalize row needs a renormalizing router"
        );
        let lp = d.path().join("layer.safetensors");
        io::save_layer(&lp, &layer, None).unwrap();
        let (hidden, logits) = synth_batch(8, 128, 8, 3);
        let b = TokenBatch {
            hidden,
            logits,
            m: 8,
            hidden_size: 128,
            n_experts: 8,
        };
        let bp = d.path().join("batch.safetensors");
        io::save_batch(&bp, &b).unwrap();
        let res = d.path().join("res.safetensors");
        let taps = MoeOptions {
            taps: true,
            ..MoeOptions::default()
        };
        let fwd = |o: MoeOptions| moe::forward(&layer, &b.hidden, &b.logits, o).unwrap();
        let mut row = |name: &str,
                       code: Option<i32>,
                       j: Value,
                       out: &str,
                       ok: bool,
                       fails: &mut Vec<String>| {
            record.push(serde_json::json!({
                "scheme": scheme.to_string(), "row": name, "exit": code,
                "verdict": j["verdict"], "variant": j["variant"],
                "diagnosis": j["diagnosis"].as_array().map(|a| a.iter().take(2).cloned().collect::<Vec<_>>()),
                "first_differing_stage": j["first_differing_stage"],
            }));
            if !ok {
                fails.push(format!("{scheme}: {name}: exit {code:?}, verdict {}, variant {}, diagnosis {}, stage {}\n{out}",
                    j["verdict"], j["variant"], j["diagnosis"].get(0).unwrap_or(&Value::Null), j["first_differing_stage"]));
            }
        };
        // Legitimate rows.
        let legit: [(&str, MoeOutput, bool, &str); 4] = [
            ("correct, f32 intermediates", fwd(taps), true, "contract"),
            (
                "correct, at vLLM's bf16 precision",
                fwd(MoeOptions {
                    intermediate: Intermediate::Bf16,
                    ..taps
                }),
                true,
                "vllm_bf16",
            ),
            (
                "same experts, top-k in another order",
                {
                    let mut o = fwd(MoeOptions::default());
                    let k = o.routing.top_k;
                    o.routing.topk_ids.chunks_mut(k).for_each(|c| c.reverse());
                    o.routing
                        .topk_weights
                        .chunks_mut(k)
                        .for_each(|c| c.reverse());
                    o
                },
                true,
                "contract",
            ),
            (
                "output only, no topk_ids",
                fwd(MoeOptions::default()),
                false,
                "contract",
            ),
        ];
        for (name, o, routing, want) in legit {
            write(&res, &o, 128, routing, o.stages.as_ref());
            let (code, j, out) = verify(d.path(), &lp, &bp, &res, &[]);
            let ok = code == Some(0)
                && j["verdict"] == "match"
                && j["variant"] == want
                && (o.stages.is_none() || j["first_differing_stage"].is_null());
            row(name, code, j, &out, ok, &mut fails);
        }
        // Faulty rows.
        for (name, f, stage) in faulty_rows(scheme) {
            assert!(f.not_applicable(&layer).is_none(), "{scheme}: {}", f.id());
            let o = f.inject_opts(&layer, &b, None, taps).unwrap();
            write(&res, &o, 128, true, o.stages.as_ref());
            let (code, j, out) = verify(d.path(), &lp, &bp, &res, &[]);
            let diag = j["diagnosis"].as_array().cloned().unwrap_or_default();
            let first = diag.first().map(|x| x["rel_l2"].as_f64().unwrap());
            let named = diag
                .iter()
                .any(|x| x["fault"] == f.id() && x["rel_l2"].as_f64() == first);
            // The stage: where the fault acts, or the first later stage whose dump differs.
            let st = o.stages.as_ref().unwrap();
            let rt = fwd(taps);
            let rs = rt.stages.as_ref().unwrap();
            let i0 = Stage::ALL.iter().position(|s| s.name() == stage).unwrap();
            let tap = |s: Stage, t: &StageTaps| match s {
                Stage::InputQdq => t.input_q.clone(),
                Stage::Gemm1 => t.gemm1.clone(),
                Stage::Act => t.act.clone(),
                Stage::InterQdq => t.inter_q.clone(),
                Stage::Gemm2 => t.gemm2.clone(),
            };
            let want_stage = Stage::ALL[i0..]
                .iter()
                .find(|s| {
                    tap(**s, st)
                        .iter()
                        .zip(tap(**s, rs))
                        .any(|(a, b)| a.to_bits() != b.to_bits())
                })
                .map(|s| s.name());
            let ok = code == Some(1)
                && j["verdict"] == "mismatch"
                && named
                && j["first_differing_stage"].as_str() == want_stage;
            row(name, code, j, &out, ok, &mut fails);
        }
    }
    let p = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("verify_table.json");
    std::fs::write(&p, serde_json::to_string_pretty(&record).unwrap()).unwrap();
    eprintln!("{} rows; the reports: {}", record.len(), p.display());
    assert_eq!(record.len(), 5 * 11);
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// `--profile` through verify: a result computed under the microxcaling profile (ties away from
/// zero) is bit-exact with the microxcaling reference; under the contract it is another result.
/// The batch's input blocks hold FP4 ties (amax 6, values on the quarter grid).
#[test]
fn verify_under_a_profile() {
    let d = tempfile::tempdir().unwrap();
    let spec = SynthSpec::new(Scheme::OCP_MX[0], 8, 128, 64, 2);
    let layer = synth_layer(&spec).unwrap().layer;
    let lp = d.path().join("layer.safetensors");
    io::save_layer(&lp, &layer, None).unwrap();
    let (mut hidden, logits) = synth_batch(8, 128, 8, 3);
    for (i, v) in hidden.iter_mut().enumerate() {
        *v = if i % 32 == 0 {
            6.0
        } else {
            ((*v * 8.0).round() / 4.0).clamp(-5.75, 5.75)
        };
    }
    let b = TokenBatch {
        hidden,
        logits,
        m: 8,
        hidden_size: 128,
        n_experts: 8,
    };
    let bp = d.path().join("batch.safetensors");
    io::save_batch(&bp, &b).unwrap();
    let o = MoeOptions {
        profile: mxmoe::format::ProfileId::Microxcaling,
        ..MoeOptions::default()
    };
    let mut l = layer.clone();
    l.config.act_scale_mode = ScaleMode::Floor;
    let out = moe::forward(&l, &b.hidden, &b.logits, o).unwrap();
    let res = d.path().join("res.safetensors");
    write(&res, &out, 128, true, None);
    // The layer's mode is even, which microxcaling lacks: the reference takes its floor (as
    // `moe --profile` does) and says so.
    let (code, j, text) = verify(d.path(), &lp, &bp, &res, &["--profile", "microxcaling"]);
    assert_eq!(
        (code, &j["grade"], &j["profile"]),
        (Some(0), &"BIT-EXACT".into(), &"microxcaling".into()),
        "{text}"
    );
    assert!(text.contains("has no 'even' scale mode"), "{text}");
    let l2 = d.path().join("layer_floor.safetensors");
    io::save_layer(&l2, &l, None).unwrap();
    let (code, j, text) = verify(d.path(), &l2, &bp, &res, &["--profile", "microxcaling"]);
    assert_eq!(
        (code, &j["grade"]),
        (Some(0), &"BIT-EXACT".into()),
        "{text}"
    );
    // An activation format the peer lacks (ggml has only MXFP4): exit 2, a clear error.
    let l6 = synth_layer(&SynthSpec::new(Scheme::OCP_MX[1], 8, 128, 64, 2))
        .unwrap()
        .layer;
    let p6 = d.path().join("layer6.safetensors");
    io::save_layer(&p6, &l6, None).unwrap();
    let (code, j, text) = verify(d.path(), &p6, &bp, &res, &["--profile", "ggml"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("has no mxfp6_e3m2") && j.is_null(), "{text}");
    let (_, j, _) = verify(d.path(), &l2, &bp, &res, &[]);
    assert_eq!(
        j["output_bit_exact"], false,
        "the profile changes the result"
    );
}
