//! Token batches (`hidden_states`, `router_logits`) and MoE results (`output`, `topk_ids`,
//! `topk_weights`).

use super::{save, IoError, OutTensor, StFile};
use crate::moe::{RouterWeights, Routing};
use std::collections::HashMap;
use std::path::Path;

/// A token batch: `hidden_states` `[M, H]`, `router_logits` `[M, E]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBatch {
    pub hidden: Vec<f32>,
    pub logits: Vec<f32>,
    pub m: usize,
    pub hidden_size: usize,
    pub n_experts: usize,
}

pub fn load_batch(path: &Path) -> Result<TokenBatch, IoError> {
    load_batch_for(path, None)
}

/// A token batch for a layer with (or without) its router weights: when the file has no
/// `router_logits` and `router` is given, the logits are computed from `hidden_states`
/// ([`RouterWeights::logits`], f32, NUMERICS.md 10.7). A file's own `router_logits` win.
pub fn load_batch_for(path: &Path, router: Option<&RouterWeights>) -> Result<TokenBatch, IoError> {
    let f = StFile::open(path)?;
    let (hidden, hs) = f.floats("hidden_states")?;
    if hs.len() != 2 || hs[0] == 0 || hs[1] == 0 {
        return Err(f.shape_err("hidden_states", "[M, H] with M, H >= 1".into(), hs));
    }
    if !f.has("router_logits") {
        if let Some(r) = router {
            if r.hidden != hs[1] {
                return Err(f.shape_err(
                    "hidden_states",
                    format!("[M, H = {}] (the router's hidden size)", r.hidden),
                    hs,
                ));
            }
            let logits = r.logits(&hidden).map_err(|e| IoError::Invalid {
                path: f.path.clone(),
                msg: e.to_string(),
            })?;
            return Ok(TokenBatch {
                hidden,
                logits,
                m: hs[0],
                hidden_size: hs[1],
                n_experts: r.n_experts,
            });
        }
        return Err(IoError::Missing {
            path: f.path.clone(),
            tensor: "router_logits".into(),
            hint: " (a batch needs router_logits [M, E] unless the layer has its router weights)"
                .into(),
        });
    }
    let (logits, ls) = f.floats("router_logits")?;
    if ls.len() != 2 || ls[0] != hs[0] || ls[1] == 0 {
        return Err(f.shape_err("router_logits", format!("[M = {}, E]", hs[0]), ls));
    }
    Ok(TokenBatch {
        hidden,
        logits,
        m: hs[0],
        hidden_size: hs[1],
        n_experts: ls[1],
    })
}

pub fn save_batch(path: &Path, b: &TokenBatch) -> Result<(), IoError> {
    save(
        path,
        &[
            OutTensor::f32("hidden_states", vec![b.m, b.hidden_size], &b.hidden),
            OutTensor::f32("router_logits", vec![b.m, b.n_experts], &b.logits),
        ],
        HashMap::new(),
    )
}

/// Save a MoE result: `output` f32 `[M, H]`, `topk_ids` i32 `[M, k]`, `topk_weights` f32 `[M, k]`.
pub fn save_result(
    path: &Path,
    output: &[f32],
    hidden: usize,
    routing: &Routing,
    meta: HashMap<String, String>,
) -> Result<(), IoError> {
    let m = output.len() / hidden.max(1);
    let k = routing.top_k;
    save(
        path,
        &[
            OutTensor::f32("output", vec![m, hidden], output),
            OutTensor::i32("topk_ids", vec![m, k], &routing.topk_ids),
            OutTensor::f32("topk_weights", vec![m, k], &routing.topk_weights),
        ],
        meta,
    )
}

/// A MoE result read back.
#[derive(Clone, Debug)]
pub struct MoeResult {
    pub output: Vec<f32>,
    pub m: usize,
    pub hidden: usize,
    pub routing: Routing,
}

pub fn load_result(path: &Path) -> Result<MoeResult, IoError> {
    let f = StFile::open(path)?;
    let (output, os_) = f.floats("output")?;
    if os_.len() != 2 {
        return Err(f.shape_err("output", "[M, H]".into(), os_));
    }
    let (ids, is) = f.ints("topk_ids")?;
    let (w, ws) = f.floats("topk_weights")?;
    if is.len() != 2 || is[0] != os_[0] || ws != is {
        return Err(f.shape_err(
            "topk_ids",
            format!("[M = {}, k], same as topk_weights {ws:?}", os_[0]),
            is,
        ));
    }
    Ok(MoeResult {
        output,
        m: os_[0],
        hidden: os_[1],
        routing: Routing {
            top_k: is[1],
            topk_ids: ids.into_iter().map(|v| v as i32).collect(),
            topk_weights: w,
        },
    })
}
