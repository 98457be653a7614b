//! Routing and the expert lists: which route / lists kernels a forward runs (`route_plan`:
//! one fused block, or the router then the lists), the one the routing op runs on its own
//! (`route_op_kernel`), the route kernels that also convert the hidden states to bf16
//! (`route_with_conversion`), what of a router decides it (`RouterShape`), and the knobs
//! `MXMOE_HIP_ROUTE` and `MXMOE_HIP_FUSED_ROUTE`. The kernels: hip/route.h, hip/lists.h, hip/route_lists_w3.h, hip/route_warp.h, hip/p8_fused.h.

use super::env_variant;
use crate::backend::BackendError;

/// The route and lists kernels' limits (shared arrays).
pub const MAX_EXPERTS: usize = 1024;
pub const MAX_TOP_K: usize = 32;
pub const MAX_GROUPS: usize = MAX_EXPERTS;

/// Routing and the expert lists (`MXMOE_HIP_ROUTE`): `v2` (`mx_route_v2`,
/// `moe_lists_v2`, `moe_route_lists_v2`: arg-max and prefix sums by warp shuffles, 2 barriers per
/// arg-max instead of 8 and 1 per scan instead of 16; the same bits), `v3` (v2, and for a softmax
/// or top-k softmax router without a correction bias or groups `mx_route_v3` /
/// `moe_route_lists_v3`, with the other routers' code compiled out; H200 catalog 583/0/0,
/// gpt-oss 1-token route+lists 0.011 vs 0.015 ms), `v4` (v3, and for one token with
/// such a router routing and lists in one warp, `moe_route_lists_w1`: no block barriers; the
/// routers with exact scores, DeepSeek's, with all 256 threads of a block computing them,
/// `moe_route_lists_v4` / `mx_route_v4`, where v2 has 64; the same bits; `route_plan`; H200
/// catalog 585/0/0, gpt-oss 1 token 0.059 -> 0.056 ms, DeepSeek-R1 0.161 -> 0.156,
/// docs/h200-2026-12-01s5-route), `v5` (the default: v4, and one token with any other router in
/// `moe_route_lists_w1g`: 256 threads compute the scores, then one warp routes with shuffles
/// only; the same bits; H200 catalog 587/0/0, DeepSeek-R1 1 token 0.138 -> 0.133 ms,
/// docs/h200-2026-12-01s5-closing), `v6` (the default: routing by warps, hip/route_warp.h,
/// where the router allows it ([`RouterShape`]): one warp per token with the arg-max rounds on
/// two warp reductions (`redux.sync` on NVIDIA) and the weights in parallel; one token's route
/// and lists in one warp (`moe_route_lists_w2_<nq>`), up to `MXMOE_HIP_FUSED_ROUTE` (default
/// [`FUSED_WARP_ROUTE_MAX_TOKENS`]) tokens' in one block (`moe_route_lists_w3_<nq>`), more
/// tokens four per block (`mx_route_w_<nq>`) then `moe_lists_v2`; sigmoid routers with 32-expert
/// chunks (DeepSeek-V3/R1) one block per token that scores with 256 threads and selects in one
/// warp after one barrier (`moe_route_lists_w2g_<nq>`, `mx_route_wg_<nq>`); the other routers as
/// v5; the same bits, hip/test/route_emu.cpp; docs/h200-2026-12-01s7-route) or `v1`. Anything
/// else is an error naming the variable.
pub(in crate::backend::hip) const ROUTE_VARIANTS: [&str; 6] = ["v6", "v5", "v4", "v3", "v2", "v1"];
pub(in crate::backend::hip) fn route_variant() -> Result<&'static str, BackendError> {
    env_variant("MXMOE_HIP_ROUTE", &ROUTE_VARIANTS)
}

/// The routing and list kernels of a forward: one block doing both (decode), or the router
/// (one block of `threads` per token) then the lists.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::backend::hip) enum RoutePlan {
    Fused {
        kernel: String,
        threads: u64,
    },
    Separate {
        route: String,
        threads: u64,
        /// Tokens per block of the route kernel (grid: the tokens / this, rounded up).
        per_block: u32,
        lists: String,
    },
}

/// The route plan's kernel that also converts the hidden states to bf16 in mx_to_bf16_p8's
/// layout, if it has one: v6's warp routing of (top-k) softmax routers for more tokens than the
/// fused block takes (hip/p8_fused.h `mx_route_wx_<nq>`, with the rows' flags the GEMM reads) and,
/// where no flags are needed (`flags` false: the mmab GEMV), the fused few-token kernels
/// (`moe_route_lists_w2x_<nq>` / `w3x`: the conversion in blocks of their own beside the routing
/// block). The H200 measured the separate fold 4 us faster at 256 gpt-oss tokens (0.928 ->
/// 0.924 ms) and 2048 (4.048 -> 4.021); folded into the fused few-token block itself (after
/// routing, by the same 8 warps) it was slower (16 tokens 0.170 -> 0.176;
/// docs/h200-2026-12-01s7-fold), hence the extra blocks.
pub(in crate::backend::hip) fn route_with_conversion(
    plan: &RoutePlan,
    flags: bool,
) -> Option<String> {
    match plan {
        RoutePlan::Separate { route, .. } => route
            .strip_prefix("mx_route_w_")
            .map(|nq| format!("mx_route_wx_{nq}")),
        RoutePlan::Fused { kernel, .. } if !flags => ["moe_route_lists_w2_", "moe_route_lists_w3_"]
            .iter()
            .find_map(|pre| {
                kernel
                    .strip_prefix(pre)
                    .map(|nq| format!("{}x_{nq}", pre.trim_end_matches('_')))
            }),
        RoutePlan::Fused { .. } => None,
    }
}

/// What the route plan needs to know of a router, from its kernel parameters
/// (`wroute::params`: [m, experts, top_k, scoring, renormalize, groups, topk_group, scaling,
/// has_bias, ..]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::hip) struct RouterShape {
    pub experts: usize,
    /// A softmax or top-k softmax router without a correction bias or groups.
    pub simple: bool,
    /// A sigmoid router that route_warp.h's block kernels take: experts a multiple of 32 up to
    /// [`MAX_EXPERTS`], and no groups or at most 32 groups of a multiple of 32 experts.
    pub sigmoid_warp: bool,
}

impl RouterShape {
    pub fn of(rp: &[u32; 12]) -> RouterShape {
        let (e, k, ng) = (rp[1] as usize, rp[2] as usize, rp[5] as usize);
        let sigmoid = rp[3] == crate::moe::Scoring::Sigmoid.id();
        let groups_ok = ng == 0 || (ng <= 32 && e % ng == 0 && (e / ng) % 32 == 0);
        RouterShape {
            experts: e,
            simple: !sigmoid && ng == 0 && rp[8] == 0,
            sigmoid_warp: sigmoid
                && e % 32 == 0
                && (32..=MAX_EXPERTS).contains(&e)
                && k <= MAX_TOP_K
                && groups_ok,
        }
    }
}

/// The keys per lane (NQ) of route_warp.h's one-warp kernels for `e` experts (e <= 32 NQ).
fn warp_nq(e: usize) -> usize {
    match e {
        0..=128 => 4,
        129..=256 => 8,
        _ => 32,
    }
}
/// The same for the sigmoid block kernels (8 or 32).
fn warp_g_nq(e: usize) -> usize {
    if e <= 256 {
        8
    } else {
        32
    }
}

/// The kernel of the routing op on its own (`HipBackend::route`): `(name, threads, tokens per
/// block)`; v6's warp kernels where the router allows, else `mx_route` (every other variant).
pub(in crate::backend::hip) fn route_op_kernel(
    variant: &str,
    shape: RouterShape,
) -> (String, u32, u32) {
    if variant == "v6" {
        if let RoutePlan::Separate {
            route,
            threads,
            per_block,
            ..
        } = route_plan(variant, shape, 2, Some(0))
        {
            if route.starts_with("mx_route_w") {
                return (route, threads as u32, per_block);
            }
        }
    }
    ("mx_route".into(), 64, 1)
}

/// Which route / lists kernels run (hip/route.h, lists.h, route_warp.h, route_lists_w3.h,
/// p8_fused.h): `variant` of `MXMOE_HIP_ROUTE`, `simple` a (top-k) softmax router without
/// correction bias or groups, `m` tokens, fused up to `fused` tokens (`MXMOE_HIP_FUSED_ROUTE`).
/// v4: one token with a simple router in one warp (`moe_route_lists_w1`); the other routers
/// with all 256 threads computing the scores (`moe_route_lists_v4`, `mx_route_v4`); simple
/// routers of several tokens as v3.
/// v6: the warp kernels where the router allows (`shape`), else v5's; `fused` (None: the
/// default) is the most tokens routed together with their lists.
pub(in crate::backend::hip) fn route_plan(
    variant: &str,
    shape: RouterShape,
    m: usize,
    fused: Option<usize>,
) -> RoutePlan {
    if variant == "v6" {
        if shape.simple {
            let nq = warp_nq(shape.experts);
            let f = fused.unwrap_or(FUSED_WARP_ROUTE_MAX_TOKENS);
            if m == 1 && f >= 1 {
                return RoutePlan::Fused {
                    kernel: format!("moe_route_lists_w2_{nq}"),
                    threads: 32,
                };
            }
            if m <= f {
                return RoutePlan::Fused {
                    kernel: format!("moe_route_lists_w3_{nq}"),
                    threads: 256,
                };
            }
            return RoutePlan::Separate {
                route: format!("mx_route_w_{nq}"),
                threads: 128,
                per_block: 4,
                lists: "moe_lists_v2".into(),
            };
        }
        if shape.sigmoid_warp {
            let nq = warp_g_nq(shape.experts);
            if m == 1 && fused.unwrap_or(FUSED_ROUTE_MAX_TOKENS) >= 1 {
                return RoutePlan::Fused {
                    kernel: format!("moe_route_lists_w2g_{nq}"),
                    threads: 256,
                };
            }
            return RoutePlan::Separate {
                route: format!("mx_route_wg_{nq}"),
                threads: 256,
                per_block: 1,
                lists: "moe_lists_v2".into(),
            };
        }
        return route_plan("v5", shape, m, fused);
    }
    let simple = shape.simple;
    let fused = fused.unwrap_or(FUSED_ROUTE_MAX_TOKENS);
    let (rv, lv) = match variant {
        "v1" => ("", ""),
        "v3" | "v4" | "v5" if simple => ("_v3", "_v2"),
        "v4" | "v5" => ("_v4", "_v2"),
        _ => ("_v2", "_v2"),
    };
    if m <= fused {
        if m == 1 && simple && (variant == "v4" || variant == "v5") {
            return RoutePlan::Fused {
                kernel: "moe_route_lists_w1".into(),
                threads: 32,
            };
        }
        if m == 1 && variant == "v5" {
            return RoutePlan::Fused {
                kernel: "moe_route_lists_w1g".into(),
                threads: 256,
            };
        }
        return RoutePlan::Fused {
            kernel: format!("moe_route_lists{rv}"),
            threads: 256,
        };
    }
    RoutePlan::Separate {
        route: format!("mx_route{rv}"),
        threads: if rv == "_v4" { 256 } else { 64 },
        per_block: 1,
        lists: format!("moe_lists{lv}"),
    }
}

/// Up to this many tokens one block routes them (one after the other) and builds the lists:
/// one launch fewer (`MXMOE_HIP_FUSED_ROUTE` overrides, 0 = never).
pub(in crate::backend::hip) const FUSED_ROUTE_MAX_TOKENS: usize = 1;
/// The same for v6's simple routers, whose fused block routes 8 tokens at a time (one per warp).
pub(in crate::backend::hip) const FUSED_WARP_ROUTE_MAX_TOKENS: usize = 16;

/// `MXMOE_HIP_FUSED_ROUTE` (None when unset or not a number: the route plan's default).
pub(in crate::backend::hip) fn fused_route_tokens() -> Option<usize> {
    std::env::var("MXMOE_HIP_FUSED_ROUTE")
        .ok()
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::hip::kernels;

    #[test]
    fn route_conversion_where_the_route_kernel_has_it() {
        let sep = |r: &str| RoutePlan::Separate {
            route: r.into(),
            threads: 128,
            per_block: 4,
            lists: "moe_lists_v2".into(),
        };
        let fused = |k: &str| RoutePlan::Fused {
            kernel: k.into(),
            threads: 256,
        };
        for nq in ["4", "8", "32"] {
            // The separate warp route writes the rows' flags: for the GEMV and the GEMM.
            for flags in [false, true] {
                let k = route_with_conversion(&sep(&format!("mx_route_w_{nq}")), flags).unwrap();
                assert_eq!(k, format!("mx_route_wx_{nq}"));
                assert!(kernels::NAMES_MMA.contains(&k.as_str()), "{k}");
            }
            // The fused few-token kernels do not: only where no flags are read.
            for w in ["w2", "w3"] {
                let f = fused(&format!("moe_route_lists_{w}_{nq}"));
                let k = route_with_conversion(&f, false).unwrap();
                assert_eq!(k, format!("moe_route_lists_{w}x_{nq}"));
                assert!(kernels::NAMES_MMA.contains(&k.as_str()), "{k}");
                assert_eq!(route_with_conversion(&f, true), None);
            }
        }
        for flags in [false, true] {
            assert_eq!(route_with_conversion(&sep("mx_route_wg_8"), flags), None);
            assert_eq!(route_with_conversion(&sep("mx_route_v3"), flags), None);
            assert_eq!(
                route_with_conversion(&fused("moe_route_lists_w2g_8"), flags),
                None
            );
            assert_eq!(
                route_with_conversion(&fused("moe_route_lists_w1"), flags),
                None
            );
        }
    }

    /// The route plans by hand: every kernel named here exists (kernels.rs lists them) and
    /// the thread counts match their launch bounds (hip/mxmoe.cu's headers).
    #[test]
    fn route_plan_names_the_kernels() {
        let fused = |k: &str, t| RoutePlan::Fused {
            kernel: k.into(),
            threads: t,
        };
        let sep = |r: &str, t, l: &str| RoutePlan::Separate {
            route: r.into(),
            threads: t,
            per_block: 1,
            lists: l.into(),
        };
        let shape = |simple, sigmoid_warp, experts| RouterShape {
            experts,
            simple,
            sigmoid_warp,
        };
        let plan = |v, simple, m, f| route_plan(v, shape(simple, false, 128), m, Some(f));
        assert_eq!(plan("v3", true, 1, 1), fused("moe_route_lists_v3", 256));
        assert_eq!(plan("v3", false, 1, 1), fused("moe_route_lists_v2", 256));
        assert_eq!(plan("v4", true, 1, 1), fused("moe_route_lists_w1", 32));
        assert_eq!(plan("v4", false, 1, 1), fused("moe_route_lists_v4", 256));
        assert_eq!(plan("v4", true, 2, 2), fused("moe_route_lists_v3", 256));
        assert_eq!(plan("v1", true, 1, 1), fused("moe_route_lists", 256));
        assert_eq!(plan("v5", true, 1, 1), fused("moe_route_lists_w1", 32));
        assert_eq!(plan("v5", false, 1, 1), fused("moe_route_lists_w1g", 256));
        assert_eq!(plan("v5", false, 2, 2), fused("moe_route_lists_v4", 256));
        assert_eq!(
            plan("v5", false, 8, 1),
            sep("mx_route_v4", 256, "moe_lists_v2")
        );
        assert_eq!(
            plan("v3", true, 8, 1),
            sep("mx_route_v3", 64, "moe_lists_v2")
        );
        assert_eq!(
            plan("v4", false, 8, 1),
            sep("mx_route_v4", 256, "moe_lists_v2")
        );
        assert_eq!(
            plan("v2", false, 8, 1),
            sep("mx_route_v2", 64, "moe_lists_v2")
        );
        assert_eq!(plan("v1", false, 8, 0), sep("mx_route", 64, "moe_lists"));
        let all: Vec<&str> = kernels::NAMES
            .iter()
            .chain(&kernels::NAMES_MORE)
            .copied()
            .collect();
        // v6: the warp kernels by expert count, the fused block up to 16 simple tokens
        // by default, the sigmoid block kernels, v5's for the other routers.
        let w = |e, m, f| route_plan("v6", shape(true, false, e), m, f);
        assert_eq!(w(128, 1, None), fused("moe_route_lists_w2_4", 32));
        assert_eq!(w(256, 1, None), fused("moe_route_lists_w2_8", 32));
        assert_eq!(w(257, 1, None), fused("moe_route_lists_w2_32", 32));
        assert_eq!(w(128, 16, None), fused("moe_route_lists_w3_4", 256));
        assert_eq!(
            w(128, 4, Some(1)),
            RoutePlan::Separate {
                route: "mx_route_w_4".into(),
                threads: 128,
                per_block: 4,
                lists: "moe_lists_v2".into()
            }
        );
        assert_eq!(
            w(128, 17, None),
            RoutePlan::Separate {
                route: "mx_route_w_4".into(),
                threads: 128,
                per_block: 4,
                lists: "moe_lists_v2".into()
            }
        );
        let g = |e, m| route_plan("v6", shape(false, true, e), m, None);
        assert_eq!(g(256, 1), fused("moe_route_lists_w2g_8", 256));
        assert_eq!(g(1024, 1), fused("moe_route_lists_w2g_32", 256));
        assert_eq!(g(256, 8), sep("mx_route_wg_8", 256, "moe_lists_v2"));
        assert_eq!(
            route_plan("v6", shape(false, false, 256), 1, None),
            fused("moe_route_lists_w1g", 256)
        );
        assert_eq!(
            route_plan("v6", shape(false, false, 256), 8, None),
            sep("mx_route_v4", 256, "moe_lists_v2")
        );
        for v in ROUTE_VARIANTS {
            for (simple, sw, e) in [(false, false, 96), (true, false, 60), (true, false, 200)]
                .into_iter()
                .chain([(true, false, 1024), (false, true, 256), (false, true, 512)])
            {
                for (m, f) in [(1, 1), (2, 2), (8, 1), (1, 0), (64, 16)] {
                    let names = match route_plan(v, shape(simple, sw, e), m, Some(f)) {
                        RoutePlan::Fused { kernel, .. } => vec![kernel],
                        RoutePlan::Separate { route, lists, .. } => vec![route, lists],
                    };
                    for n in names {
                        assert!(
                            all.contains(&n.as_str()),
                            "{v} {simple} {sw} {e} {m} {f}: {n} is not built"
                        );
                    }
                }
            }
        }
    }

    /// Which routers take v6's warp kernels, from their kernel parameters (by hand: gpt-oss,
    /// DeepSeek-R1, chunks that do not fit a warp), and the routing op's kernel.
    #[test]
    fn router_shapes_pick_the_warp_kernels() {
        use crate::moe::Scoring;
        let rp = |e: u32, k: u32, s: Scoring, ng: u32, tg: u32, bias: u32| {
            [1, e, k, s.id(), 1, ng, tg, 1f32.to_bits(), bias, 0, 0, 0]
        };
        let gpt_oss = RouterShape::of(&rp(128, 4, Scoring::TopkSoftmax, 0, 0, 0));
        assert!(gpt_oss.simple && !gpt_oss.sigmoid_warp && gpt_oss.experts == 128);
        let r1 = RouterShape::of(&rp(256, 8, Scoring::Sigmoid, 8, 4, 1));
        assert!(!r1.simple && r1.sigmoid_warp);
        assert!(RouterShape::of(&rp(256, 8, Scoring::Sigmoid, 0, 0, 0)).sigmoid_warp);
        assert!(RouterShape::of(&rp(384, 8, Scoring::Sigmoid, 1, 1, 1)).sigmoid_warp);
        // 20 experts per group, 48 experts (not a multiple of 32), 64 groups
        assert!(!RouterShape::of(&rp(160, 6, Scoring::Sigmoid, 8, 3, 1)).sigmoid_warp);
        assert!(!RouterShape::of(&rp(48, 6, Scoring::Sigmoid, 0, 0, 1)).sigmoid_warp);
        assert!(!RouterShape::of(&rp(2048, 8, Scoring::Sigmoid, 64, 4, 1)).sigmoid_warp);
        // softmax with a bias or groups: neither
        let sb = RouterShape::of(&rp(256, 8, Scoring::Softmax, 0, 0, 1));
        assert!(!sb.simple && !sb.sigmoid_warp);
        assert!(!RouterShape::of(&rp(160, 6, Scoring::Softmax, 8, 3, 0)).simple);
        assert_eq!(
            route_op_kernel("v6", gpt_oss),
            ("mx_route_w_4".to_string(), 128, 4)
        );
        assert_eq!(
            route_op_kernel("v6", r1),
            ("mx_route_wg_8".to_string(), 256, 1)
        );
        assert_eq!(route_op_kernel("v6", sb), ("mx_route".to_string(), 64, 1));
        assert_eq!(
            route_op_kernel("v5", gpt_oss),
            ("mx_route".to_string(), 64, 1)
        );
    }
}
