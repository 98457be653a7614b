//! The weight view's data: quantization error of the layer's weights under every scale rule,
//! against the unquantized weights (when the dataset has them).

use super::{all_rules, quant_stats, Dataset, TensorStats, SUMMARY_HEADER};
use mxmoe::format::MxTensor;

/// Weight quantization error: needs the unquantized weights.
#[derive(Clone, Debug)]
pub struct WeightView {
    pub n_experts: usize,
    pub w13: TensorStats,
    pub w2: TensorStats,
}

impl WeightView {
    pub fn csv(&self) -> String {
        let mut s = String::from(SUMMARY_HEADER);
        self.w13.summary_csv(&mut s);
        self.w2.summary_csv(&mut s);
        s += "\n# per expert\ntensor,rule,group,index,rel_l2\n";
        self.w13.groups_csv(&mut s);
        self.w2.groups_csv(&mut s);
        s += "\n# E8M0 scale exponent histogram\ntensor,rule,exponent,blocks\n";
        self.w13.hist_csv(&mut s);
        self.w2.hist_csv(&mut s);
        s
    }
}

pub fn weight_view(d: &Dataset) -> Option<WeightView> {
    let (w13o, w2o) = (d.w13_orig.as_ref()?, d.w2_orig.as_ref()?);
    let l = &d.layer;
    let f = l.config.scheme.weight;
    let stats = |name, x: &[f32], k, rows, t: &MxTensor| TensorStats {
        name,
        group_name: "expert",
        by_rule: all_rules(true)
            .into_iter()
            .map(|r| quant_stats(f, r, x, k, rows, Some(t)))
            .collect(),
    };
    Some(WeightView {
        n_experts: l.local_experts(),
        w13: stats(
            "w13",
            w13o,
            l.config.hidden,
            2 * l.config.inter,
            &l.weights.w13,
        ),
        w2: stats("w2", w2o, l.config.inter, l.config.hidden, &l.weights.w2),
    })
}
