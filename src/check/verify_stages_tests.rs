//! Per-stage verification with planted faults: every fault of `check::faults` injected on a
//! small layer of each of the five OCP MX schemes, its intermediates dumped as a result would
//! (the reference's stage taps with the fault in), must be located at the stage where the fault
//! acts, with the fault first in the stage diagnosis; legitimate dumps (another accumulation,
//! vLLM's bf16 intermediates, top-k listed in another order) agree at every stage.

use super::*;
use crate::check::verify::verify_with;
use crate::format::ScaleMode;
use crate::moe::synth::{synth_batch, synth_layer, SynthSpec};
use crate::moe::{Intermediate, MoeOutput};
use crate::scheme::Scheme;

fn small(scheme: Scheme) -> (MoeLayer, TokenBatch) {
    let mut spec = SynthSpec::new(scheme, 8, 128, 64, 2);
    spec.bias = true;
    let (hidden, logits) = synth_batch(8, 128, 8, 3);
    let b = TokenBatch {
        hidden,
        logits,
        m: 8,
        hidden_size: 128,
        n_experts: 8,
    };
    (synth_layer(&spec).unwrap().layer, b)
}

/// Every stage of a forward with taps, as a result would dump them.
fn dump_of(o: &MoeOutput) -> StageDump {
    let t = o.stages.as_ref().unwrap();
    StageDump {
        stages: Stage::ALL.iter().map(|&s| (s, s.tap(t).to_vec())).collect(),
    }
}

fn taps(o: MoeOptions) -> MoeOptions {
    MoeOptions { taps: true, ..o }
}

/// Verify `out` with its dump; returns (first differing stage, stage diagnosis ids).
fn judge(
    layer: &MoeLayer,
    b: &TokenBatch,
    out: &MoeOutput,
    dump: &StageDump,
    opts: &VerifyOptions,
) -> (Option<&'static str>, Vec<(&'static str, f64)>) {
    let ids = &out.routing.topk_ids;
    let mut rep = verify_with(
        layer,
        b,
        &out.output,
        Some(ids),
        Some(&out.routing.topk_weights),
        opts,
    )
    .unwrap();
    verify_stages(layer, b, &mut rep, dump, Some(ids), opts).unwrap();
    assert_eq!(rep.stages.len(), dump.stages.len());
    (
        rep.first_differing_stage,
        rep.stage_diagnosis
            .iter()
            .map(|d| (d.fault, d.rel_l2))
            .collect(),
    )
}

fn expected_stage(f: Fault) -> &'static str {
    match f {
        Fault::InputQdqMissing | Fault::ActivationScaleMode(_) => "input_qdq_out",
        Fault::Fp4NibblesSwapped
        | Fault::Fp6BytesSwapped
        | Fault::GateUpSwapped
        | Fault::Bf16Accumulation
        | Fault::RouterWeightOnInputMissing => "gemm1_out",
        // A stage dumped in bf16 is compared with the bf16-rounded reference, so the rounding
        // itself is storage precision at gemm1_out; its effect first shows in the activation.
        Fault::Bf16Intermediates => "act_out",
        Fault::IntermediateQdqMissing => "intermediate_qdq_out",
        Fault::RenormalizeMissing => "gemm2_out",
        Fault::RoutingDiffers => "routing",
    }
}

#[test]
fn planted_faults_are_located_at_their_stage_on_every_ocp_mx_scheme() {
    let mut fails = Vec::new();
    let (mut located, mut moved) = (0, Vec::new());
    for scheme in Scheme::OCP_MX {
        let (layer, b) = small(scheme);
        let reference =
            moe::forward(&layer, &b.hidden, &b.logits, taps(MoeOptions::default())).unwrap();
        let rt = reference.stages.as_ref().unwrap();
        for f in Fault::ALL {
            if f.not_applicable(&layer).is_some() || f == Fault::RoutingDiffers {
                continue;
            }
            let opts = VerifyOptions {
                accept_bf16: f != Fault::Bf16Intermediates,
                ..VerifyOptions::default()
            };
            let out = f
                .inject_opts(&layer, &b, None, taps(MoeOptions::default()))
                .unwrap();
            let (stage, diag) = judge(&layer, &b, &out, &dump_of(&out), &opts);
            // Where the fault acts; when its tap there equals the reference's bit for bit on this
            // batch (e.g. floor and even scales pick the same bytes for every input block), the
            // first later stage where it differs.
            let ft = out.stages.as_ref().unwrap();
            let start = Stage::ALL
                .iter()
                .position(|s| s.name() == expected_stage(f))
                .unwrap();
            let want = Stage::ALL[start..]
                .iter()
                .find(|s| {
                    s.tap(ft)
                        .iter()
                        .zip(s.tap(rt))
                        .any(|(a, b)| a.to_bits() != b.to_bits())
                })
                .map_or("none", |s| s.name());
            if want != expected_stage(f) {
                moved.push(format!("{scheme}: {} first differs at {want}", f.id()));
            }
            if stage != Some(want) {
                fails.push(format!(
                    "{scheme}: {} located at {stage:?}, want {want}",
                    f.id()
                ));
                continue;
            }
            // The fault is first at that stage (or ties with the first: two scale modes that
            // pick the same scales for every block).
            let mine = diag.iter().find(|d| d.0 == f.id()).map(|d| d.1);
            if mine != Some(diag[0].1) {
                fails.push(format!(
                    "{scheme}: {} at {want}: diagnosis {:?}",
                    f.id(),
                    &diag[..3.min(diag.len())]
                ));
                continue;
            }
            located += 1;
        }
    }
    eprintln!("located {located}; acting later than their stage on this batch: {moved:#?}");
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(located >= 5 * 8 && moved.len() <= 2, "{located} {moved:?}");
}

#[test]
fn legitimate_dumps_agree_at_every_stage() {
    for scheme in Scheme::OCP_MX {
        let (layer, b) = small(scheme);
        for (name, o) in [
            (
                "f32 accumulation",
                MoeOptions {
                    accumulate: crate::moe::Accumulate::F32,
                    ..MoeOptions::default()
                },
            ),
            (
                "vllm bf16",
                MoeOptions {
                    intermediate: Intermediate::Bf16,
                    ..MoeOptions::default()
                },
            ),
        ] {
            let out = moe::forward(&layer, &b.hidden, &b.logits, taps(o)).unwrap();
            let (stage, _) = judge(&layer, &b, &out, &dump_of(&out), &VerifyOptions::default());
            assert_eq!(stage, None, "{scheme} {name}");
        }
        // Top-k listed in reverse order, with the slot rows moved along: still agrees.
        let mut out =
            moe::forward(&layer, &b.hidden, &b.logits, taps(MoeOptions::default())).unwrap();
        let k = out.routing.top_k;
        out.routing.topk_ids.chunks_mut(k).for_each(|c| c.reverse());
        out.routing
            .topk_weights
            .chunks_mut(k)
            .for_each(|c| c.reverse());
        let mut d = dump_of(&out);
        for (s, v) in d.stages.iter_mut() {
            if s.per_slot() {
                let w = v.len() / (b.m * k);
                let mut r = vec![0f32; v.len()];
                for a in 0..b.m * k {
                    let (t, j) = (a / k, a % k);
                    let src = t * k + (k - 1 - j);
                    r[a * w..(a + 1) * w].copy_from_slice(&v[src * w..(src + 1) * w]);
                }
                *v = r;
            }
        }
        let (stage, _) = judge(&layer, &b, &out, &d, &VerifyOptions::default());
        assert_eq!(stage, None, "{scheme} reordered top-k");
    }
}

#[test]
fn a_corrupted_activation_is_located_at_act_out_and_partial_dumps_work() {
    let (layer, b) = small(Scheme::OCP_MX[0]);
    let out = moe::forward(&layer, &b.hidden, &b.logits, taps(MoeOptions::default())).unwrap();
    let mut d = dump_of(&out);
    let i = layer.config.inter;
    let act = &mut d
        .stages
        .iter_mut()
        .find(|(s, _)| *s == Stage::Act)
        .unwrap()
        .1;
    act[..i].iter_mut().for_each(|v| *v *= 1.25);
    let (stage, _) = judge(&layer, &b, &out, &d, &VerifyOptions::default());
    assert_eq!(stage, Some("act_out"));
    // Only gemm2_out dumped, from the renormalize fault: located there.
    let f = Fault::RenormalizeMissing;
    let o = f
        .inject_opts(&layer, &b, None, taps(MoeOptions::default()))
        .unwrap();
    let g2 = Stage::Gemm2.tap(o.stages.as_ref().unwrap()).to_vec();
    let only = StageDump {
        stages: vec![(Stage::Gemm2, g2)],
    };
    let (stage, diag) = judge(&layer, &b, &o, &only, &VerifyOptions::default());
    assert_eq!(
        (stage, diag[0].0),
        (Some("gemm2_out"), "renormalize_missing")
    );
    // A stage of the wrong size is an error naming it.
    let bad = StageDump {
        stages: vec![(Stage::Act, vec![0.0; 5])],
    };
    let mut rep = verify_with(
        &layer,
        &b,
        &out.output,
        None,
        None,
        &VerifyOptions::default(),
    )
    .unwrap();
    let e = verify_stages(&layer, &b, &mut rep, &bad, None, &VerifyOptions::default()).unwrap_err();
    assert!(e.to_string().contains("act_out has 5 values"), "{e}");
    let _ = ScaleMode::Even;
}
