//! The catalog's routing and MoE cases.

use super::catalog::{
    moe_case, moe_case_of, moe_case_opts, route_case, Case, LayerSpec, MoeCase, RouteCase,
    RouteInput, Tier,
};
use super::inputs::{self, ADVERSARIAL_BIASES, ADVERSARIAL_ROUTERS, ADVERSARIAL_TOKENS};
use crate::format::{MxFormat, ScaleMode};
use crate::moe::synth::SynthSpec;
use crate::moe::{Accumulate, Activation, Intermediate, MoeOptions, RouterConfig, Scoring};
use crate::scheme::Scheme;

fn spec(scheme: Scheme, act: Activation, e: usize, h: usize, i: usize, k: usize) -> SynthSpec {
    let mut s = SynthSpec::new(scheme, e, h, i, k);
    s.activation = act;
    s
}

fn deepseek_router(top_k: usize, n_group: usize, topk_group: usize) -> RouterConfig {
    RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k,
        renormalize: true,
        n_group: Some(n_group),
        topk_group: Some(topk_group),
        routed_scaling_factor: 2.5,
        apply_router_weight_on_input: false,
    }
}

/// Standalone routing: every scoring x renormalize x grouping at several widths, exact ties,
/// DeepSeek with a correction bias, more groups than a GPU router may hold; then, with weights
/// bit for bit, the sigmoid sweep and the adversarial DeepSeek inputs.
pub fn route_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (e, k, m) in [
        (8usize, 1usize, 1usize),
        (8, 2, 17),
        (16, 8, 64),
        (64, 4, 33),
        (128, 8, 5),
    ] {
        for scoring in [Scoring::Softmax, Scoring::TopkSoftmax, Scoring::Sigmoid] {
            for renormalize in [false, true] {
                for group in [None, Some((4usize, 2usize))] {
                    if group.is_some_and(|(g, tg)| k > tg * (e / g)) {
                        continue;
                    }
                    let router = RouterConfig {
                        scoring,
                        top_k: k,
                        renormalize,
                        n_group: group.map(|g| g.0),
                        topk_group: group.map(|g| g.1),
                        routed_scaling_factor: if renormalize { 2.5 } else { 1.0 },
                        apply_router_weight_on_input: false,
                    };
                    v.push(route_case(
                        Tier::Quick,
                        RouteCase {
                            router,
                            n_experts: e,
                            m,
                            input: RouteInput::Synth {
                                seed: 3 + e as u64,
                                ties: true,
                                correction_bias: None,
                            },
                        },
                    ));
                }
            }
        }
    }
    // DeepSeek-V3/R1: sigmoid, e_score_correction_bias (selection only), groups, scaling.
    for (e, k, g, tg, m) in [
        (16usize, 4usize, 4usize, 2usize, 17usize),
        (256, 8, 8, 4, 5),
    ] {
        v.push(route_case(
            Tier::Quick,
            RouteCase {
                router: deepseek_router(k, g, tg),
                n_experts: e,
                m,
                input: RouteInput::Synth {
                    seed: 71,
                    ties: false,
                    correction_bias: Some(9),
                },
            },
        ));
    }
    // 64 groups of 2 experts (more groups than a 32-bit group mask holds).
    v.push(route_case(
        Tier::Quick,
        RouteCase {
            router: RouterConfig {
                top_k: 2,
                n_group: Some(64),
                topk_group: Some(2),
                ..RouterConfig::default()
            },
            n_experts: 128,
            m: 5,
            input: RouteInput::Synth {
                seed: 131,
                ties: false,
                correction_bias: None,
            },
        },
    ));
    v.extend(wide_route_cases());
    v.extend(sigmoid_sweep_cases());
    v.extend(adversarial_route_cases());
    v
}

/// Wide routers: more than 128 experts (HIP's warp routing holds 8 keys a lane up to 256
/// experts, 32 up to 1024, the most any GPU router takes): softmax and top-k softmax at 256 and
/// 1024 experts, and a grouped sigmoid router of 1024 experts in 8 groups of 128 with a
/// correction bias (weights bit for bit). Seeds such that every case selects one of the last 32
/// experts (the keys of each lane's last register; `wide_router_cases_select_the_last_experts`).
fn wide_route_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (e, k) in [(256usize, 8usize), (1024, 16)] {
        for scoring in [Scoring::Softmax, Scoring::TopkSoftmax] {
            let router = RouterConfig {
                scoring,
                top_k: k,
                renormalize: scoring == Scoring::Softmax,
                ..RouterConfig::default()
            };
            v.push(route_case(
                Tier::Quick,
                RouteCase {
                    router,
                    n_experts: e,
                    m: 5,
                    input: RouteInput::Synth {
                        seed: 5 + e as u64,
                        ties: true,
                        correction_bias: None,
                    },
                },
            ));
        }
    }
    v.push(
        route_case(
            Tier::Quick,
            RouteCase {
                router: deepseek_router(8, 8, 4),
                n_experts: 1024,
                m: 5,
                input: RouteInput::Synth {
                    seed: 7,
                    ties: false,
                    correction_bias: Some(11),
                },
            },
        )
        .weights_bit_exact(),
    );
    v
}

/// The GPU's exact sigmoid gives the CPU's bits (formerly the wgpu test
/// `sigmoid_matches_cpu_bit_for_bit`): [`inputs::sigmoid_sweep`] through the route op (sigmoid
/// scoring, top_k = E = 32, no renormalization, scaling 1: the weights are the sigmoids),
/// weights bit for bit. Every 509th bit pattern in the full suite, every 8191st in quick.
fn sigmoid_sweep_cases() -> Vec<Case> {
    [(Tier::Quick, 8191u32), (Tier::Full, 509)]
        .into_iter()
        .map(|(tier, step)| {
            let router = RouterConfig {
                scoring: Scoring::Sigmoid,
                top_k: 32,
                renormalize: false,
                ..RouterConfig::default()
            };
            let rc = RouteCase {
                router,
                n_experts: 32,
                m: inputs::sigmoid_sweep_tokens(step),
                input: RouteInput::SigmoidSweep { step },
            };
            route_case(tier, rc).weights_bit_exact()
        })
        .collect()
}

/// Adversarial DeepSeek-V3 routing (formerly the wgpu test `routing_deepseek_adversarial_exact`):
/// every router of [`ADVERSARIAL_ROUTERS`] x every bias of [`ADVERSARIAL_BIASES`] x sigmoid and
/// softmax scoring (both with the bias: exact scores) x renormalize or not, scaling 2.5, on
/// [`inputs::adversarial_routing`]: ids exact, weights bit for bit.
fn adversarial_route_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (r, &(e, k, group)) in ADVERSARIAL_ROUTERS.iter().enumerate() {
        for bias in 0..ADVERSARIAL_BIASES.len() {
            for scoring in [Scoring::Sigmoid, Scoring::Softmax] {
                for renormalize in [true, false] {
                    let router = RouterConfig {
                        scoring,
                        top_k: k,
                        renormalize,
                        n_group: group.map(|g| g.0),
                        topk_group: group.map(|g| g.1),
                        routed_scaling_factor: 2.5,
                        apply_router_weight_on_input: false,
                    };
                    let rc = RouteCase {
                        router,
                        n_experts: e,
                        m: ADVERSARIAL_TOKENS,
                        input: RouteInput::Adversarial { router: r, bias },
                    };
                    v.push(route_case(Tier::Quick, rc).weights_bit_exact());
                }
            }
        }
    }
    v
}

/// `mxmoe check`'s scheme matrix at one size: every OCP MX scheme, weight-only MXFP4 and the
/// MXFP8 pair with both activations (M cycling through 1, 3, 17, 64; biases with swigluoai),
/// top-k 1 and k = E, experts with no tokens, the gpt-oss, DeepSeek and Llama 4 routers and an
/// expert_map.
fn scheme_matrix(tier: Tier, h: usize, i: usize, e: usize) -> Vec<Case> {
    let mut v = Vec::new();
    let mut schemes: Vec<Scheme> = Scheme::OCP_MX.to_vec();
    schemes.push(Scheme::new(MxFormat::Fp4E2M1, None));
    schemes.push(Scheme::new(MxFormat::Fp8E4M3, Some(MxFormat::Fp8E4M3)));
    for (si, &scheme) in schemes.iter().enumerate() {
        for (ai, act) in [Activation::Silu, Activation::SwigluOai]
            .into_iter()
            .enumerate()
        {
            let m = [1, 3, 17, 64][(si + ai) % 4];
            let mut s = spec(scheme, act, e, h, i, 2);
            s.bias = ai == 1;
            s.seed = 100 + si as u64 * 10 + ai as u64;
            let seed = s.seed;
            v.push(moe_case(tier, &LayerSpec::new(s), m, seed));
        }
    }
    let base = Scheme::OCP_MX[0];
    // top-k = 1 and 8 (8 = every expert of the quick layer).
    for k in [1, 8] {
        let mut s = SynthSpec::new(base, e, h, i, k);
        s.seed = 7 + k as u64;
        v.push(moe_case(tier, &LayerSpec::new(s), 17, 7 + k as u64));
    }
    // Experts with no tokens: one token, many experts.
    let s = SynthSpec::new(Scheme::OCP_MX[1], 2 * e, h, i, 2);
    v.push(moe_case(tier, &LayerSpec::new(s), 1, 9));
    // gpt-oss router: top-k then softmax, swigluoai, biases, weight-only MXFP4.
    let mut s = spec(
        Scheme::new(MxFormat::Fp4E2M1, None),
        Activation::SwigluOai,
        e,
        h,
        i,
        4,
    );
    s.bias = true;
    s.router.scoring = Scoring::TopkSoftmax;
    s.router.renormalize = false;
    v.push(moe_case(tier, &LayerSpec::new(s), 5, 11));
    // DeepSeek-V3 router: sigmoid, correction bias, groups, scaling factor.
    let mut s = SynthSpec::new(base, e, h, i, 2);
    s.router = deepseek_router(2, 4, 2);
    let l = LayerSpec {
        correction_bias: Some(3),
        ..LayerSpec::new(s)
    };
    v.push(moe_case(tier, &l, 17, 12));
    // Llama 4 router: top-1 sigmoid, weight on input.
    let mut s = SynthSpec::new(Scheme::OCP_MX[2], e, h, i, 1);
    s.router.scoring = Scoring::Sigmoid;
    s.router.renormalize = false;
    s.router.apply_router_weight_on_input = true;
    v.push(moe_case(tier, &LayerSpec::new(s), 3, 13));
    // expert_map: the router sees 2E experts, half of them local.
    let l = LayerSpec {
        router_experts: Some(2 * e),
        ..LayerSpec::new(SynthSpec::new(Scheme::OCP_MX[3], e, h, i, 2))
    };
    v.push(moe_case(tier, &l, 17, 14));
    v
}

/// Every MoE case.
pub fn moe_cases() -> Vec<Case> {
    let q = Tier::Quick;
    let mut v = scheme_matrix(q, 64, 96, 8);
    // Every OCP MX scheme and weight-only MXFP4, both activations, biases on every other
    // scheme, M = 1, 3, 17, 64.
    let mut schemes: Vec<Scheme> = Scheme::OCP_MX.to_vec();
    schemes.push(Scheme::new(MxFormat::Fp4E2M1, None));
    for (si, &scheme) in schemes.iter().enumerate() {
        for act in [Activation::Silu, Activation::SwigluOai] {
            let mut s = spec(scheme, act, 8, 96, 64, 2);
            s.bias = si % 2 == 0;
            s.seed = 100 + si as u64;
            let l = LayerSpec::new(s);
            for m in [1usize, 3, 17, 64] {
                v.push(moe_case(q, &l, m, 7 + m as u64));
            }
        }
    }
    // top-k 1..8 with the other element formats (MXFP8 pairs, MXINT8, weight-only MXFP6).
    for (scheme, k) in [
        (
            Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp4E2M1)),
            1usize,
        ),
        (Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp6E2M3)), 8),
        (Scheme::new(MxFormat::Fp8E4M3, Some(MxFormat::Fp8E4M3)), 8),
        (Scheme::new(MxFormat::Fp8E5M2, Some(MxFormat::Fp8E5M2)), 2),
        (Scheme::new(MxFormat::Int8, Some(MxFormat::Int8)), 4),
        (Scheme::new(MxFormat::Fp6E3M2, None), 8),
    ] {
        let mut s = spec(scheme, Activation::Silu, 16, 64, 96, k);
        s.bias = true;
        let l = LayerSpec::new(s);
        for m in [1usize, 17, 64] {
            v.push(moe_case(q, &l, m, 31));
        }
    }
    // expert_map: 16 router experts, 8 local (the even ids), swigluoai with biases.
    let mut s = spec(Scheme::OCP_MX[0], Activation::SwigluOai, 8, 64, 64, 4);
    s.bias = true;
    let l = LayerSpec {
        router_experts: Some(16),
        ..LayerSpec::new(s)
    };
    for m in [1usize, 3, 17] {
        v.push(moe_case(q, &l, m, 41));
    }
    // Llama 4: the router weight on the input (top-1), sigmoid scoring, floor activation scales.
    let mut s = spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 64, 1);
    s.router.apply_router_weight_on_input = true;
    s.router.scoring = Scoring::Sigmoid;
    let l = LayerSpec {
        act_scale_mode: ScaleMode::Floor,
        ..LayerSpec::new(s)
    };
    for m in [1usize, 17] {
        v.push(moe_case(q, &l, m, 43));
    }
    // gpt-oss routing (top-k then softmax) with rceil scales; grouped softmax routing.
    let mut s = spec(Scheme::OCP_MX[1], Activation::SwigluOai, 16, 64, 64, 4);
    s.router.scoring = Scoring::TopkSoftmax;
    let mut l = LayerSpec {
        act_scale_mode: ScaleMode::RCeil,
        ..LayerSpec::new(s)
    };
    v.push(moe_case(q, &l, 17, 47));
    l.synth.router.scoring = Scoring::Softmax;
    l.synth.router.n_group = Some(4);
    l.synth.router.topk_group = Some(2);
    v.push(moe_case(q, &l, 17, 53));
    // More rows per expert than one GEMM tile (64): several tiles of one expert, the last
    // partial.
    let mut s = spec(Scheme::OCP_MX[2], Activation::SwigluOai, 4, 96, 96, 2);
    s.bias = true;
    v.push(moe_case(q, &LayerSpec::new(s), 200, 77));
    // The prefill GEMM with the other operand kinds: every GPU path switches to the GEMM above
    // a few token-expert pairs per expert (wgpu: 32 by default), and until these the only
    // catalog case that reached it had MX-quantized activations. Weight-only MXFP4 (unquantized
    // activations: the hi/lo bf16 split on HIP, f16 hi + lo on cooperative matrices) and 6-bit
    // weights with 6-bit activations, 80 pairs per expert each.
    let s = spec(
        Scheme::new(MxFormat::Fp4E2M1, None),
        Activation::Silu,
        4,
        64,
        64,
        2,
    );
    v.push(moe_case(q, &LayerSpec::new(s), 160, 79));
    let mut s = spec(Scheme::OCP_MX[3], Activation::SwigluOai, 4, 64, 96, 2);
    s.bias = true;
    v.push(moe_case(q, &LayerSpec::new(s), 160, 83));
    // Weight-only 8-bit codes (MXFP8 and MXINT8 weights, f32 activations): the bf16 GEMM
    // with hi + lo activations (HIP `moe_gemm{1,2}_split_cb8`, on gfx950 as well, whose scaled
    // MFMA takes MX activations only), 8.5 pairs per expert (above the 4 up to which NVIDIA
    // takes the v2 GEMM: v1 there too).
    for (w, act, seed) in [
        (MxFormat::Fp8E4M3, Activation::Silu, 97u64),
        (MxFormat::Int8, Activation::SwigluOai, 101),
    ] {
        let mut s = spec(Scheme::new(w, None), act, 4, 64, 64, 2);
        s.bias = act == Activation::SwigluOai;
        s.seed = seed;
        v.push(moe_case(q, &LayerSpec::new(s), 17, seed));
    }
    // Large weights (x 2^4 before quantization: many 32-blocks get E8M0 scale bytes above 128,
    // the rest not): HIP's mma GEMM decodes a step whose scale bytes are all <= 128 with one
    // bf16 multiply by 2^(s - 1) and any other with two (hip/gemm_mma.h); the synthetic weights
    // elsewhere have almost no such blocks. Weight-only MXFP4 (hi + lo activations, 80 pairs per expert: 64-pair
    // tiles) and MXFP4 activations (12 pairs per expert: 16-pair tiles).
    for (act, m) in [(None, 160usize), (Some(MxFormat::Fp4E2M1), 24)] {
        let mut s = spec(
            Scheme::new(MxFormat::Fp4E2M1, act),
            Activation::Silu,
            4,
            64,
            64,
            2,
        );
        s.weight_log2 = 4;
        v.push(moe_case(q, &LayerSpec::new(s), m, 89));
    }
    // gpt-oss-like awkward sizes: H = 2880 (90 blocks: not a multiple of the 256-element GEMV
    // chunk nor of the 128-column GEMM2 tile), I = 704, top-k-then-softmax, swigluoai,
    // weight-only MXFP4 with biases.
    let mut s = spec(
        Scheme::new(MxFormat::Fp4E2M1, None),
        Activation::SwigluOai,
        4,
        2880,
        704,
        2,
    );
    s.bias = true;
    s.router.scoring = Scoring::TopkSoftmax;
    s.router.renormalize = false;
    v.push(moe_case(q, &LayerSpec::new(s), 3, 5));
    // bf16 intermediates (vLLM parity): rounded after the GEMM1 epilogue, the activation, the
    // GEMM2 epilogue and the final sum.
    let bf16 = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::Bf16,
        taps: false,
        profile: crate::format::ProfileId::Contract,
    };
    for (scheme, act) in [
        (Scheme::OCP_MX[0], Activation::Silu),
        (Scheme::new(MxFormat::Fp4E2M1, None), Activation::SwigluOai),
    ] {
        let mut s = spec(scheme, act, 8, 64, 96, 2);
        s.bias = true;
        v.push(moe_case_opts(
            q,
            &LayerSpec::new(s.clone()),
            17,
            vec![5],
            bf16,
        ));
        // One token of bf16 hidden states, weight-only: HIP's gemv1 routing the token itself
        // with hi-only activations (`moe_gemv1_mmab_rt_4_cb4`; f32 hidden states take the
        // split kernel).
        if scheme.activation.is_none() {
            v.push(moe_case_opts(q, &LayerSpec::new(s), 1, vec![5], bf16));
        }
    }
    // DeepSeek-V3: sigmoid + correction bias + groups + scaling factor.
    let mut s = spec(Scheme::OCP_MX[0], Activation::Silu, 16, 64, 64, 4);
    s.router = deepseek_router(4, 4, 2);
    let l = LayerSpec {
        correction_bias: Some(9),
        ..LayerSpec::new(s)
    };
    for m in [1usize, 17] {
        v.push(moe_case(q, &l, m, 71));
    }
    v.extend(deepseek_shaped(q));
    v.extend(wide_routers(q));
    // The scheme matrix at a larger size.
    v.extend(scheme_matrix(Tier::Full, 512, 384, 32));
    v
}

/// A DeepSeek-V3-shaped layer (formerly the wgpu test `moe_deepseek_shaped_forward`): 64
/// experts in 8 groups, 4 groups eligible, top-8, scaling 2.5, MXFP4, a correction bias with a
/// run of equal entries (experts 8..16: ties between saturated experts); M = 1, 5, 33 (seeds
/// 90 + M) and a batch of 9 (seed 7) whose token 0 saturates every sigmoid (its keys are
/// 1.0 + bias; with these biases eight experts of the chosen groups rank above the equal run).
/// Ids exact, routing weights bit for bit, outputs within the MoE tolerance.
fn deepseek_shaped(tier: Tier) -> Vec<Case> {
    let mut s = spec(Scheme::OCP_MX[0], Activation::Silu, 64, 64, 64, 8);
    s.router = deepseek_router(8, 8, 4);
    let l = LayerSpec {
        correction_bias: Some(23),
        equal_bias: Some((8, 16)),
        ..LayerSpec::new(s)
    };
    let mut v: Vec<Case> = [1usize, 5, 33]
        .into_iter()
        .map(|m| moe_case(tier, &l, m, 90 + m as u64).weights_bit_exact())
        .collect();
    let saturated = MoeCase {
        layer: l,
        m: 9,
        seeds: vec![7],
        opts: super::catalog::moe_f32(),
        saturated_token: true,
    };
    v.push(moe_case_of(tier, saturated).weights_bit_exact());
    v
}

/// MoE layers with wide routers (more than 128 experts; small weights, H = I = 64, of random
/// codes and scales: `packed`, as quantizing f32 weights of 1024 experts took about a second of
/// CPU per build): a gpt-oss-style router (top-k then softmax, weight-only MXFP4, swigluoai
/// with biases) of 256 experts, top-4, and of 1024, top-8; a DeepSeek-style one (sigmoid,
/// correction bias, groups, scaling 2.5; MXFP4) of 256 experts in 8 groups of 32 and of 1024
/// in 32 groups of 32 (the most groups HIP's sigmoid block kernels take), top-8, routing
/// weights bit for bit. M = 1 (HIP: one token's route and lists in one warp or block), 5 (the
/// top-k softmax: the fused few-token block) and 17 (the router on its own, then the lists).
/// One batch seed per router (14, 2) such that every case selects one of the last 32 experts
/// (`wide_router_cases_select_the_last_experts`).
fn wide_routers(tier: Tier) -> Vec<Case> {
    let mut v = Vec::new();
    for (e, k) in [(256usize, 4usize), (1024, 8)] {
        let mut s = spec(
            Scheme::new(MxFormat::Fp4E2M1, None),
            Activation::SwigluOai,
            e,
            64,
            64,
            k,
        );
        s.bias = true;
        s.router.scoring = Scoring::TopkSoftmax;
        s.router.renormalize = false;
        s.seed = 200 + k as u64;
        let l = LayerSpec {
            packed: true,
            ..LayerSpec::new(s)
        };
        for m in [1usize, 5, 17] {
            v.push(moe_case(tier, &l, m, 14));
        }
    }
    for (e, g) in [(256usize, 8usize), (1024, 32)] {
        let mut s = spec(Scheme::OCP_MX[0], Activation::Silu, e, 64, 64, 8);
        s.router = deepseek_router(8, g, 4);
        s.seed = 210 + g as u64;
        let l = LayerSpec {
            correction_bias: Some(31),
            packed: true,
            ..LayerSpec::new(s)
        };
        for m in [1usize, 17] {
            v.push(moe_case(tier, &l, m, 2).weights_bit_exact());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::catalog::Kind;

    /// The large-weight cases do what their comment says: each layer has E8M0 scale bytes
    /// above 128 (HIP's two-multiply decode) in a tenth or more of its blocks, and bytes at or
    /// below it (the one-multiply decode), in both weight tensors.
    #[test]
    fn large_weight_cases_have_scale_bytes_on_both_sides_of_128() {
        let mut large = 0;
        for case in moe_cases() {
            let Kind::Moe(mc) = &case.kind else { continue };
            if mc.layer.synth.weight_log2 == 0 {
                continue;
            }
            large += 1;
            let layer = mc.layer.build().unwrap();
            let w = &layer.weights;
            for (name, t) in [("w13", &w.w13), ("w2", &w.w2)] {
                let a = t.scales.iter().filter(|&&b| b > 128).count();
                let n = t.scales.len();
                eprintln!("{}: {name}: {a} of {n} scale bytes above 128", case.id);
                assert!(
                    a * 10 >= n && a < n,
                    "{}: {name}: {a} of {n} above 128",
                    case.id
                );
            }
        }
        assert_eq!(large, 2);
    }

    /// The wide-router cases do what their comments say: every one selects (on the CPU) one of
    /// its last 32 experts, whose keys a GPU warp router of 8 or 32 keys a lane holds in its
    /// last register (with 1024 experts, a kernel that dropped that register failed only the
    /// cases that select one of them).
    #[test]
    fn wide_router_cases_select_the_last_experts() {
        let mut n = 0;
        for case in wide_route_cases()
            .into_iter()
            .chain(wide_routers(Tier::Quick))
        {
            let (router, e, logits, bias) = match &case.kind {
                Kind::Route(rc) => (rc.router.clone(), rc.n_experts, rc.logits(), rc.bias()),
                Kind::Moe(mc) => {
                    let layer = mc.layer.build().unwrap();
                    (
                        layer.config.router.clone(),
                        mc.layer.n_experts(),
                        mc.batch(0).1,
                        layer.weights.e_score_correction_bias.clone(),
                    )
                }
                _ => unreachable!("{}", case.id),
            };
            assert!(e > 128, "{}", case.id);
            let r = crate::moe::route::route(&router, &logits, e, bias.as_deref()).unwrap();
            assert!(
                r.topk_ids.iter().any(|&i| i as usize >= e - 32),
                "{}: selects none of the last 32 experts: {:?}",
                case.id,
                r.topk_ids
            );
            n += 1;
        }
        assert_eq!(n, 15);
    }
}
