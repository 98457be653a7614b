//! Model shape presets: the MoE layers of real models as data (`mxmoe bench --shape`).
//!
//! A preset is a layer's sizes and configuration, not its weights: `bench` fills it with random
//! finite codes and plausible scales ([`super::synth::synth_layer_packed`]), which is all a
//! timing needs. `custom` is the base that `--experts/--hidden/--inter/--top-k` override.

use super::synth::SynthSpec;
use super::{Activation, RouterConfig, Scoring};
use crate::format::MxFormat;
use crate::scheme::Scheme;
use std::fmt;
use std::str::FromStr;

/// One model's MoE layer shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Preset {
    /// The name `--shape` takes.
    pub name: &'static str,
    pub experts: usize,
    pub hidden: usize,
    pub inter: usize,
    /// The router; its `top_k` is the preset's top-k ([`Preset::top_k`]).
    pub router: RouterConfig,
    pub activation: Activation,
    /// Whether the layer has w13/w2 biases.
    pub bias: bool,
    pub scheme: Scheme,
    /// Whether the router has a DeepSeek `e_score_correction_bias` (selection only).
    pub correction_bias: bool,
}

/// A router without groups, scaling or weight-on-input.
const fn plain_router(scoring: Scoring, top_k: usize, renormalize: bool) -> RouterConfig {
    RouterConfig {
        scoring,
        top_k,
        renormalize,
        n_group: None,
        topk_group: None,
        routed_scaling_factor: 1.0,
        apply_router_weight_on_input: false,
    }
}

/// gpt-oss: H = I = 2880, top-4 of a top-k-then-softmax router (no renormalization),
/// SwiGLU-OAI, biases, MXFP4 weights with unquantized activations.
const fn gpt_oss(name: &'static str, experts: usize) -> Preset {
    Preset {
        name,
        experts,
        hidden: 2880,
        inter: 2880,
        router: plain_router(Scoring::TopkSoftmax, 4, false),
        activation: Activation::SwigluOai,
        bias: true,
        scheme: Scheme::new(MxFormat::Fp4E2M1, None),
        correction_bias: false,
    }
}

/// A SiLU layer without biases under w_mxfp4_a_mxfp4.
const fn silu_mxfp4(
    name: &'static str,
    experts: usize,
    hidden: usize,
    inter: usize,
    router: RouterConfig,
) -> Preset {
    Preset {
        name,
        experts,
        hidden,
        inter,
        router,
        activation: Activation::Silu,
        bias: false,
        scheme: Scheme::OCP_MX[0],
        correction_bias: false,
    }
}

impl Preset {
    /// gpt-oss-20b: 32 experts (the gpt-oss layer otherwise).
    pub const GPT_OSS_20B: Preset = gpt_oss("gpt-oss-20b", 32);

    /// gpt-oss-120b: 128 experts.
    pub const GPT_OSS_120B: Preset = gpt_oss("gpt-oss-120b", 128);

    /// DeepSeek-R1: 256 routed experts, H 7168, I 2048, SiLU, w_mxfp4_a_mxfp4, and R1's router:
    /// sigmoid scores, an `e_score_correction_bias` for selection, 8 groups of which 4 are
    /// eligible, top-8, renormalized, scaled by 2.5.
    pub const DEEPSEEK_R1: Preset = Preset {
        correction_bias: true,
        ..silu_mxfp4(
            "deepseek-r1",
            256,
            7168,
            2048,
            RouterConfig {
                scoring: Scoring::Sigmoid,
                top_k: 8,
                renormalize: true,
                n_group: Some(8),
                topk_group: Some(4),
                routed_scaling_factor: 2.5,
                apply_router_weight_on_input: false,
            },
        )
    };

    /// Qwen3-30B-A3B: 128 experts, H 2048, I 768, softmax top-8, renormalized.
    pub const QWEN3_30B_A3B: Preset = silu_mxfp4(
        "qwen3-30b-a3b",
        128,
        2048,
        768,
        plain_router(Scoring::Softmax, 8, true),
    );

    /// Llama 4 Maverick: 128 experts, H 5120, I 8192, top-1 sigmoid, the router weight applied
    /// on the input.
    pub const LLAMA4_MAVERICK: Preset = silu_mxfp4(
        "llama4-maverick",
        128,
        5120,
        8192,
        RouterConfig {
            scoring: Scoring::Sigmoid,
            top_k: 1,
            renormalize: false,
            n_group: None,
            topk_group: None,
            routed_scaling_factor: 1.0,
            apply_router_weight_on_input: true,
        },
    );

    /// The base of a custom shape: 32 experts, H = I = 1024, top-4, SiLU, w_mxfp4_a_mxfp4.
    pub const CUSTOM: Preset = silu_mxfp4(
        "custom",
        32,
        1024,
        1024,
        plain_router(Scoring::Softmax, 4, true),
    );

    /// Every preset, in the order error messages list them.
    pub const ALL: [Preset; 6] = [
        Preset::GPT_OSS_20B,
        Preset::GPT_OSS_120B,
        Preset::DEEPSEEK_R1,
        Preset::QWEN3_30B_A3B,
        Preset::LLAMA4_MAVERICK,
        Preset::CUSTOM,
    ];

    pub fn top_k(&self) -> usize {
        self.router.top_k
    }

    /// The known names as a sentence: `gpt-oss-120b, deepseek-r1 or custom`.
    pub fn names() -> String {
        let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }

    /// What to synthesize for this preset (seed 1, weights quantized with `even` scales).
    pub fn synth_spec(&self) -> SynthSpec {
        let mut s = SynthSpec::new(
            self.scheme,
            self.experts,
            self.hidden,
            self.inter,
            self.top_k(),
        );
        s.activation = self.activation;
        s.bias = self.bias;
        s.router = self.router.clone();
        s
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A `--shape` that names no preset; the message lists the known ones.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown shape '{0}' (expected {list})", list = Preset::names())]
pub struct UnknownPreset(pub String);

impl FromStr for Preset {
    type Err = UnknownPreset;
    fn from_str(s: &str) -> Result<Self, UnknownPreset> {
        Preset::ALL
            .iter()
            .find(|p| p.name == s)
            .cloned()
            .ok_or_else(|| UnknownPreset(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_lists_them() {
        for p in Preset::ALL {
            assert_eq!(p.name.parse::<Preset>().unwrap(), p);
        }
        let e = "llama".parse::<Preset>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown shape 'llama' (expected gpt-oss-20b, gpt-oss-120b, deepseek-r1, \
             qwen3-30b-a3b, llama4-maverick or custom)"
        );
    }

    #[test]
    fn synth_spec_carries_the_preset() {
        let s = Preset::GPT_OSS_120B.synth_spec();
        assert_eq!(
            (s.n_experts, s.hidden, s.inter, s.router.top_k),
            (128, 2880, 2880, 4)
        );
        assert_eq!(s.activation, Activation::SwigluOai);
        assert!(s.bias && !s.router.renormalize);
        assert_eq!(s.router.scoring, Scoring::TopkSoftmax);
        assert_eq!(s.scheme.name(), "w_mxfp4");
        let d = Preset::DEEPSEEK_R1.synth_spec();
        assert_eq!(d.router.scoring, Scoring::Sigmoid);
        assert_eq!((d.router.n_group, d.router.topk_group), (Some(8), Some(4)));
        let with_bias: Vec<&str> = Preset::ALL
            .iter()
            .filter(|p| p.correction_bias)
            .map(|p| p.name)
            .collect();
        assert_eq!(with_bias, ["deepseek-r1"]);
    }
}
