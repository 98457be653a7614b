//! The activation view's data: QDQ error of the token batch at both QDQ points (the input, and
//! the intermediate the layer computes, from the shared forward's activation tap) under every
//! scale mode.

use super::{all_rules, quant_stats, Dataset, LayerRun, TensorStats, SUMMARY_HEADER};
use mxmoe::format::{MxFormat, ScaleMode};

/// The activation QDQ error of the token batch at the input and the intermediate QDQ point.
#[derive(Clone, Debug)]
pub struct ActView {
    /// The scheme's activation format, `None` for a weight-only scheme (nothing to show).
    pub format: Option<MxFormat>,
    /// The layer's own activation scale mode (the one the forward pass uses).
    pub layer_mode: ScaleMode,
    /// `[M, H]` under each mode.
    pub input: Option<TensorStats>,
    /// `[M*k, I]` (token-major, slot order) under each mode; the intermediate values are those
    /// the layer computes: the activation stage tap of the shared forward ([`LayerRun`]: input
    /// QDQ'd with the layer's own mode, GEMM1 on the stored weights, activation). Slots routed
    /// to experts the layer does not hold are zero.
    pub intermediate: Option<TensorStats>,
    pub top_k: usize,
}

impl ActView {
    pub fn csv(&self) -> String {
        let mut s = String::from(SUMMARY_HEADER);
        let ts: Vec<&TensorStats> = self.input.iter().chain(&self.intermediate).collect();
        for t in &ts {
            t.summary_csv(&mut s);
        }
        s += "\n# per token (input) / token-expert slot (intermediate)\ntensor,rule,group,index,rel_l2\n";
        for t in &ts {
            t.groups_csv(&mut s);
        }
        s += "\n# E8M0 scale exponent histogram\ntensor,rule,exponent,blocks\n";
        for t in &ts {
            t.hist_csv(&mut s);
        }
        s
    }
}

/// Both QDQ points under every scale mode. The input is the batch itself; the intermediate is
/// the shared forward's activation tap (`run.stages.act`), so this view runs no forward.
pub fn act_view(d: &Dataset, run: &LayerRun) -> ActView {
    let l = &d.layer;
    let top_k = run.routing.top_k;
    let Some(f) = l.config.scheme.activation else {
        return ActView {
            format: None,
            layer_mode: l.config.act_scale_mode,
            input: None,
            intermediate: None,
            top_k,
        };
    };
    let rules = all_rules(false);
    let stats = |name, group_name, x: &[f32], k| TensorStats {
        name,
        group_name,
        by_rule: rules
            .iter()
            .map(|&r| quant_stats(f, r, x, k, 1, None))
            .collect(),
    };
    ActView {
        format: Some(f),
        layer_mode: l.config.act_scale_mode,
        input: Some(stats("input", "token", &d.hidden, l.config.hidden)),
        intermediate: Some(stats(
            "intermediate",
            "token-expert slot",
            &run.stages.act,
            l.config.inter,
        )),
        top_k,
    }
}
