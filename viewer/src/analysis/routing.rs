//! The routing view's data: router scores, the chosen top-k and the expert load.

use super::Dataset;
use mxmoe::moe::route::scores;
use mxmoe::moe::{Routing, Scoring};
use rayon::prelude::*;

/// Router probabilities, the chosen top-k and the expert load.
#[derive(Clone, Debug)]
pub struct RoutingView {
    pub m: usize,
    pub n_experts: usize,
    pub top_k: usize,
    pub scoring: Scoring,
    /// `[M, E]` per-expert scores (softmax probabilities or sigmoids; for `topk_softmax`, the
    /// full softmax, for display).
    pub scores: Vec<f32>,
    pub routing: Routing,
    /// Tokens routed to each expert (each of a token's k slots counts once).
    pub load: Vec<usize>,
    pub max_over_mean: f64,
    /// Coefficient of variation of the load: std / mean.
    pub cv: f64,
    /// Experts that got no token.
    pub empty: Vec<usize>,
}

impl RoutingView {
    /// Whether expert `e` is among token `t`'s top-k, and at which slot.
    pub fn slot_of(&self, t: usize, e: usize) -> Option<usize> {
        let k = self.top_k;
        self.routing.topk_ids[t * k..(t + 1) * k]
            .iter()
            .position(|&id| id as usize == e)
    }

    pub fn csv(&self) -> String {
        let mut s = String::from("token,expert,score,selected_slot,router_weight\n");
        for t in 0..self.m {
            for e in 0..self.n_experts {
                let (slot, w) = match self.slot_of(t, e) {
                    Some(j) => (
                        j.to_string(),
                        format!("{:e}", self.routing.topk_weights[t * self.top_k + j]),
                    ),
                    None => (String::new(), String::new()),
                };
                s += &format!(
                    "{t},{e},{:e},{slot},{w}\n",
                    self.scores[t * self.n_experts + e]
                );
            }
        }
        s += "\n# expert load\nexpert,tokens\n";
        for (e, n) in self.load.iter().enumerate() {
            s += &format!("{e},{n}\n");
        }
        s += &format!(
            "# max/mean,{:.6}\n# cv,{:.6}\n# empty experts,{}\n",
            self.max_over_mean,
            self.cv,
            self.empty.len()
        );
        s
    }
}

/// The routing view: the library's router on the batch's logits (the same call the layer's
/// forward makes, so it equals the shared forward's routing, without running the forward:
/// routing stays instant on real-sized layers), scores for display, the load per expert and
/// its balance.
pub fn routing_view(d: &Dataset) -> Result<RoutingView, String> {
    let l = &d.layer;
    let e = l.config.n_experts;
    let routing = mxmoe::moe::route(
        &l.config.router,
        &d.logits,
        e,
        l.weights.e_score_correction_bias.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let scores: Vec<f32> = d
        .logits
        .par_chunks(e)
        .flat_map_iter(|row| scores(l.config.router.scoring, row))
        .collect();
    let mut load = vec![0usize; e];
    for &id in &routing.topk_ids {
        load[id as usize] += 1;
    }
    let mean = load.iter().sum::<usize>() as f64 / e as f64;
    let max = *load.iter().max().unwrap_or(&0) as f64;
    let var = load.iter().map(|&n| (n as f64 - mean).powi(2)).sum::<f64>() / e as f64;
    Ok(RoutingView {
        m: d.m,
        n_experts: e,
        top_k: l.config.router.top_k,
        scoring: l.config.router.scoring,
        scores,
        load: load.clone(),
        max_over_mean: if mean > 0.0 { max / mean } else { 0.0 },
        cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        empty: (0..e).filter(|&x| load[x] == 0).collect(),
        routing,
    })
}
