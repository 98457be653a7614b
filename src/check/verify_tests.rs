//! Tests of `check::verify`: the report on our own result, and the fault matrix (every fault
//! planted with `check::faults` on a small layer of each OCP MX scheme).

use super::*;
use crate::moe::synth::{synth_batch, synth_layer, SynthSpec};
use crate::moe::{Activation, Scoring};
use crate::scheme::Scheme;

fn batch(m: usize, h: usize, e: usize, seed: u64) -> TokenBatch {
    let (hidden, logits) = synth_batch(m, h, e, seed);
    TokenBatch {
        hidden,
        logits,
        m,
        hidden_size: h,
        n_experts: e,
    }
}

fn result(o: MoeOutput) -> MoeResult {
    MoeResult {
        m: o.routing.tokens(),
        hidden: o.output.len() / o.routing.tokens(),
        output: o.output,
        routing: o.routing,
    }
}

fn setup() -> (MoeLayer, TokenBatch, MoeResult) {
    let spec = SynthSpec::new(Scheme::OCP_MX[2], 4, 64, 32, 2);
    let layer = synth_layer(&spec).unwrap().layer;
    let b = batch(3, 64, 4, 5);
    let r = moe::forward(&layer, &b.hidden, &b.logits, MoeOptions::default()).unwrap();
    (layer, b, result(r))
}

#[test]
fn own_result_is_bit_exact_and_matches_the_contract() {
    let (layer, batch, res) = setup();
    let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
    assert_eq!(rep.verdict, Verdict::BitExact);
    assert_eq!(rep.variant.as_deref(), Some("contract"));
    assert_eq!(
        (rep.ids_identical, rep.ids_differ, rep.ids_total),
        (Some(true), Some(0), 6)
    );
    assert_eq!(rep.routing_weights_rel_l2, Some(0.0));
    assert_eq!(rep.summary(), "BIT-EXACT");
    assert!(rep.diagnosis.is_empty());
    assert_eq!(rep.variants.len(), 8);
    assert_eq!(rep.contract_rel_l2, 0.0);
    let contract = &rep.variants[1];
    assert_eq!(contract.name(), "even scales, f32 intermediates");
    assert_eq!(
        (contract.id.as_str(), contract.legitimate),
        ("contract", true)
    );
    assert_eq!(rep.variants[5].id, "vllm_bf16");
    assert_eq!(rep.variants[0].id, "floor_scales_f32");
    assert!(rep.tolerance > 0.0 && rep.tolerance <= 1e-2);
    let j = serde_json::to_value(&rep).unwrap();
    assert_eq!(j["verdict"], "match");
    assert_eq!(j["grade"], "BIT-EXACT");
    assert_eq!(j["variant"], "contract");
    assert_eq!(j["variants"][1]["scale_mode"], "even");
    assert_eq!(j["tensors"][0]["name"], "output");
}

#[test]
fn perturbed_result_is_wrong_and_shape_is_checked() {
    let (layer, batch, mut res) = setup();
    res.output[7] += 1.0;
    let rep = verify(&layer, &batch, &res, 1e-9).unwrap();
    assert_eq!(rep.verdict, Verdict::Wrong);
    assert_eq!(rep.variant, None);
    assert_eq!((rep.worst.token, rep.worst.column), (0, 7));
    assert_eq!(rep.contract_max_abs, rep.variants[1].max_abs);
    assert!(!rep.diagnosis.is_empty() && rep.diagnosis_margin.is_some());
    assert!(
        rep.summary().starts_with("WRONG (rel-L2 "),
        "{}",
        rep.summary()
    );
    let j = serde_json::to_value(&rep).unwrap();
    assert_eq!(j["verdict"], "mismatch");
    assert!(j["variant"].is_null());
    res.m = 2;
    let e = verify(&layer, &batch, &res, 1e-2).unwrap_err();
    assert_eq!(e.to_string(), "output is [2, 64], expected [M = 3, H = 64]");
    let e = verify_output(&layer, &batch, &res.output[..64], None, None, 1e-2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "output has 64 values, expected [M = 3, H = 64] = 192"
    );
    let e = verify_output(&layer, &batch, &res.output, Some(&[0, 1]), None, 1e-2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "topk_ids has 2 values, expected [M = 3, k = 2] = 6"
    );
}

#[test]
fn routing_is_compared_as_sets_and_only_when_given() {
    let (layer, batch, mut res) = setup();
    let rep = verify_output(&layer, &batch, &res.output, None, None, 1e-2).unwrap();
    assert_eq!(rep.verdict, Verdict::BitExact);
    assert_eq!((rep.ids_identical, rep.ids_differ), (None, None));
    assert_eq!((rep.ids_total, rep.routing_weights_rel_l2), (6, None));
    // Another top-k order with its weights: the same sets, a match.
    res.routing.topk_ids.swap(0, 1);
    res.routing.topk_weights.swap(0, 1);
    let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
    assert_eq!((rep.verdict, rep.ids_differ), (Verdict::BitExact, Some(0)));
    // The ids swapped without their weights: the weights no longer agree.
    res.routing.topk_weights.swap(0, 1);
    let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
    assert_eq!(rep.verdict, Verdict::Wrong);
    assert!(
        rep.summary().contains("routing weights differ"),
        "{}",
        rep.summary()
    );
}

/// A small layer of `scheme` with its batch: 8 experts, top-2, H = 128, I = 64, 8 tokens.
fn small(scheme: Scheme) -> (MoeLayer, TokenBatch) {
    let mut spec = SynthSpec::new(scheme, 8, 128, 64, 2);
    spec.bias = true;
    (synth_layer(&spec).unwrap().layer, batch(8, 128, 8, 3))
}

/// Plant `f` on `layer` and check the verdict and the diagnosis; a fault that ties with
/// another (or that the layer cannot tell from a legitimate variant) is reported in `skips`.
fn plant(
    tag: &str,
    layer: &MoeLayer,
    b: &TokenBatch,
    f: Fault,
    fails: &mut Vec<String>,
    skips: &mut Vec<String>,
) {
    let opts = VerifyOptions {
        accept_bf16: f != Fault::Bf16Intermediates,
        ..VerifyOptions::default()
    };
    let out = f.inject(layer, b, None).unwrap();
    let rep = verify_result(layer, b, &result(out), &opts).unwrap();
    if rep.verdict.passed() {
        let v = rep.variant.clone().unwrap_or_default();
        let lv = rep.variants.iter().find(|x| x.id == v).unwrap();
        if lv.indistinguishable.iter().any(|x| x == f.id()) {
            skips.push(format!("{tag}: {} indistinguishable from {v}", f.id()));
        } else {
            fails.push(format!("{tag}: {} passed as {v}", f.id()));
        }
        return;
    }
    let first = &rep.diagnosis[0];
    if first.fault == f.id() {
        return;
    }
    let mine = rep.diagnosis.iter().find(|d| d.fault == f.id());
    match mine {
        Some(d) if d.rel_l2 == first.rel_l2 => skips.push(format!(
            "{tag}: {} ties with {} (rel-L2 {:.3e})",
            f.id(),
            first.fault,
            d.rel_l2
        )),
        _ => fails.push(format!(
            "{tag}: {} diagnosed as {:?}",
            f.id(),
            rep.diagnosis
                .iter()
                .take(3)
                .map(|d| format!("{} {:.3e}", d.fault, d.rel_l2))
                .collect::<Vec<_>>()
        )),
    }
}

fn legit(tag: &str, layer: &MoeLayer, b: &TokenBatch, fails: &mut Vec<String>) {
    let run = |intermediate, accumulate| {
        let o = MoeOptions {
            accumulate,
            intermediate,
            taps: false,
            profile: crate::format::ProfileId::Contract,
        };
        result(moe::forward(layer, &b.hidden, &b.logits, o).unwrap())
    };
    let mut reordered = run(Intermediate::F32, Accumulate::F64);
    let k = reordered.routing.top_k;
    reordered
        .routing
        .topk_ids
        .chunks_mut(k)
        .for_each(|c| c.reverse());
    reordered
        .routing
        .topk_weights
        .chunks_mut(k)
        .for_each(|c| c.reverse());
    let cases = [
        (
            "contract",
            run(Intermediate::F32, Accumulate::F64),
            "contract",
        ),
        (
            "contract f32-acc",
            run(Intermediate::F32, Accumulate::F32),
            "contract",
        ),
        (
            "vllm bf16",
            run(Intermediate::Bf16, Accumulate::F64),
            "vllm_bf16",
        ),
        (
            "vllm bf16 f32-acc",
            run(Intermediate::Bf16, Accumulate::F32),
            "vllm_bf16",
        ),
        ("reordered top-k", reordered, "contract"),
    ];
    for (name, res, want) in cases {
        let rep = verify_result(layer, b, &res, &VerifyOptions::default()).unwrap();
        if !rep.verdict.passed() || rep.variant.as_deref() != Some(want) {
            fails.push(format!("{tag}: legitimate {name}: {}", rep.summary()));
        }
    }
}

#[test]
fn every_planted_fault_is_caught_and_diagnosed_on_every_ocp_mx_scheme() {
    let (mut fails, mut skips) = (Vec::new(), Vec::new());
    for scheme in Scheme::OCP_MX {
        let tag = scheme.to_string();
        let (layer, b) = small(scheme);
        legit(&tag, &layer, &b, &mut fails);
        for f in Fault::ALL {
            match f.not_applicable(&layer) {
                None => plant(&tag, &layer, &b, f, &mut fails, &mut skips),
                Some(why) => skips.push(format!("{tag}: {} not applicable ({why})", f.id())),
            }
        }
        // gpt-oss style: SwiGLU-OAI on interleaved rows, top-k softmax router, biases.
        let mut spec = SynthSpec::new(scheme, 8, 128, 64, 2);
        (spec.bias, spec.activation) = (true, Activation::SwigluOai);
        spec.router.scoring = Scoring::TopkSoftmax;
        let lg = synth_layer(&spec).unwrap().layer;
        let tag_g = format!("{tag} (gpt-oss style)");
        legit(&tag_g, &lg, &b, &mut fails);
        for f in Fault::ALL {
            if f.not_applicable(&lg).is_none() {
                plant(&tag_g, &lg, &b, f, &mut fails, &mut skips);
            }
        }
        // A layer whose own scale mode is rceil: `activation_scale_mode_even` is a fault there.
        let mut lr = layer.clone();
        lr.config.act_scale_mode = ScaleMode::RCeil;
        let tag_r = format!("{tag} (rceil layer)");
        legit(&tag_r, &lr, &b, &mut fails);
        let even = Fault::ActivationScaleMode(ScaleMode::Even);
        plant(&tag_r, &lr, &b, even, &mut fails, &mut skips);
        // Llama 4 routing: top-1 sigmoid, the router weight on the input.
        let mut l4 = layer.clone();
        let r = &mut l4.config.router;
        (r.scoring, r.top_k, r.renormalize) = (Scoring::Sigmoid, 1, false);
        r.apply_router_weight_on_input = true;
        let tag_4 = format!("{tag} (llama4 routing)");
        legit(&tag_4, &l4, &b, &mut fails);
        let missing = Fault::RouterWeightOnInputMissing;
        plant(&tag_4, &l4, &b, missing, &mut fails, &mut skips);
    }
    eprintln!("skipped:\n  {}", skips.join("\n  "));
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

#[test]
fn fault_ids_are_stable_and_round_trip() {
    let ids: Vec<&str> = Fault::ALL.iter().map(|f| f.id()).collect();
    assert_eq!(ids.len(), 14);
    for f in Fault::ALL {
        assert_eq!(Fault::from_id(f.id()), Some(f));
    }
    assert_eq!(Fault::from_id("nope"), None);
}

#[test]
fn a_result_written_in_bf16_is_compared_with_bf16_references() {
    let (layer, batch, mut res) = setup();
    let raw = res.output.clone();
    res.output
        .iter_mut()
        .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
    let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
    assert_eq!(rep.verdict, Verdict::WithinTolerance, "{}", rep.summary());
    assert_eq!(rep.variant.as_deref(), Some("contract"));
    assert!(rep.output_bf16 && !rep.output_bit_exact);
    assert_eq!(rep.contract_rel_l2, rel_l2(&res.output, &raw).0);
    assert!(rep.contract_rel_l2 > 0.0);
}

#[test]
fn contract_only_makes_bf16_intermediates_a_fault() {
    let (layer, batch, _) = setup();
    let o = MoeOptions {
        intermediate: Intermediate::Bf16,
        ..MoeOptions::default()
    };
    let res = result(moe::forward(&layer, &batch.hidden, &batch.logits, o).unwrap());
    let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
    assert_eq!(rep.variant.as_deref(), Some("vllm_bf16"));
    let opts = VerifyOptions {
        accept_bf16: false,
        ..VerifyOptions::default()
    };
    let rep = verify_result(&layer, &batch, &res, &opts).unwrap();
    assert_eq!(rep.verdict, Verdict::Wrong);
    assert_eq!(rep.diagnosis[0].fault, "bf16_intermediates");
    assert!(!rep.variants[5].legitimate);
}
