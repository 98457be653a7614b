//! The model's router (gate) weights: router logits from hidden states (NUMERICS.md 10.7).
//!
//! `logits[m, e] = f32( sum_k W[e, k] * x[m, k] + b[e] )`: the products and the sum are exact
//! in f64 up to the sum's rounding (a product of two f32 values is exact in f64; the sum over
//! H <= 2^20 terms is accumulated in f64 in k order, then the bias is added in f64), rounded
//! once to f32. The weights are widened exactly to f32 when loaded (bf16/f16 checkpoints). The
//! logits are computed on the host for every backend, before the backend routes, so every
//! backend routes the same f32 logits (one GEMV of E x H per token: small next to the experts).

use super::MoeError;
use rayon::prelude::*;

/// Router weights `[E, H]` (row e = expert e) and an optional bias `[E]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterWeights {
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub n_experts: usize,
    pub hidden: usize,
}

impl RouterWeights {
    /// Checked: `weight` holds `n_experts * hidden` values, `bias` `n_experts`.
    pub fn new(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        n_experts: usize,
        hidden: usize,
    ) -> Result<Self, MoeError> {
        if n_experts == 0 || hidden == 0 || weight.len() != n_experts * hidden {
            return Err(MoeError::Shape(format!(
                "router weight has {} values, expected [E = {n_experts}, H = {hidden}]",
                weight.len()
            )));
        }
        if let Some(b) = &bias {
            if b.len() != n_experts {
                return Err(MoeError::Shape(format!(
                    "router bias has {} values, expected E = {n_experts}",
                    b.len()
                )));
            }
        }
        Ok(RouterWeights {
            weight,
            bias,
            n_experts,
            hidden,
        })
    }

    /// Router logits `[M, E]` for hidden states `[M, H]` (module doc for the arithmetic).
    pub fn logits(&self, hidden: &[f32]) -> Result<Vec<f32>, MoeError> {
        let h = self.hidden;
        if hidden.is_empty() || !hidden.len().is_multiple_of(h) {
            return Err(MoeError::Shape(format!(
                "hidden_states has {} values, expected [M, H = {h}] for the router",
                hidden.len()
            )));
        }
        let e = self.n_experts;
        let mut out = vec![0f32; hidden.len() / h * e];
        out.par_chunks_mut(e)
            .zip(hidden.par_chunks(h))
            .for_each(|(o, x)| {
                for (j, oj) in o.iter_mut().enumerate() {
                    let w = &self.weight[j * h..(j + 1) * h];
                    let mut acc = 0f64;
                    for (a, b) in w.iter().zip(x) {
                        acc += *a as f64 * *b as f64;
                    }
                    if let Some(b) = &self.bias {
                        acc += b[j] as f64;
                    }
                    *oj = acc as f32;
                }
            });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logits_by_hand() {
        // E = 2, H = 3; W = [[1, 2, 3], [-1, 0.5, 0]], b = [0.25, -1].
        let r = RouterWeights::new(
            vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.0],
            Some(vec![0.25, -1.0]),
            2,
            3,
        )
        .unwrap();
        // x0 = [1, 1, 1] -> [6.25, -1.5]; x1 = [2, -4, 0.5] -> [2 - 8 + 1.5 + 0.25, -2 - 2 - 1].
        let l = r.logits(&[1.0, 1.0, 1.0, 2.0, -4.0, 0.5]).unwrap();
        assert_eq!(l, vec![6.25, -1.5, -4.25, -5.0]);
        assert!(r.logits(&[1.0; 4]).is_err());
        assert!(RouterWeights::new(vec![0.0; 5], None, 2, 3).is_err());
    }

    #[test]
    fn one_rounding_at_the_end() {
        // 1 + 2^-30 - 1 in f32 steps is 0 (2^-30 is lost against 1); in f64 it is kept, and
        // rounded once it is 2^-30.
        let r = RouterWeights::new(vec![1.0, 1.0, 1.0], None, 1, 3).unwrap();
        let l = r.logits(&[1.0, 2f32.powi(-30), -1.0]).unwrap();
        assert_eq!(l, vec![2f32.powi(-30)]);
    }
}
