//! I/O: MX tensor files, layer bundles (vLLM/Quark names), gpt-oss checkpoints, token batches
//! and MoE results (ARCHITECTURE.md "File formats").
//!
//! Every error names the file, the tensor and what was expected. Writes are atomic: the bytes go
//! to a temporary file in the target's folder, which is renamed over the target only once
//! complete, so a failed run leaves no partial output.
//!
//! Modules: `stfile` (reading and writing safetensors files, memory-mapped: `StFile`, `save`),
//! `output` (the one writer, `write_atomic`, `all_or_nothing`, and the input/output path
//! checks), `validate` (duplicate header keys, layer keys and tables, warnings), `mx` (MX tensor files), `batch` (token batches and MoE results), `layer`
//! (layer bundles), `model` (model directories and files, layer listing and selection),
//! `conventions` (naming conventions: finding and loading layers), `gptoss` (gpt-oss expert
//! tensors), `gguf` (llama.cpp GGUF), `floats` (float tensors for quantize/qdq).

mod batch;
pub mod conventions;
mod floats;
pub mod gguf;
mod gptoss;
mod layer;
pub mod model;
mod mx;
mod output;
mod stfile;
mod validate;

pub use batch::{
    load_batch, load_batch_for, load_result, save_batch, save_result, MoeResult, TokenBatch,
};
pub use conventions::{Convention, LayerInfo};
pub use floats::{float_tensors, float_tensors_named, FloatTensor};
pub use layer::{load_layer, save_layer, save_loaded, LoadedLayer};
pub use model::{list_layers, load_layer_with, LayerQuery};
pub use mx::{load_mx, save_mx, save_mx_profile, MxTensors};
pub use output::{
    all_or_nothing, check_input, check_outputs, write_atomic, write_atomic_with,
};
pub use stfile::{save, OutTensor, StFile};
pub use validate::LayerWarning;

use std::path::Path;

/// I/O errors: which file, which tensor, what was expected.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("{path}: {source}")]
    Os {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a valid safetensors file ({msg})")]
    Corrupt { path: String, msg: String },
    #[error("{path}: missing tensor '{tensor}'{hint}")]
    Missing {
        path: String,
        tensor: String,
        hint: String,
    },
    #[error("{path}: tensor '{tensor}' has dtype {got}, expected {expected}")]
    Dtype {
        path: String,
        tensor: String,
        expected: String,
        got: String,
    },
    #[error("{path}: tensor '{tensor}' has shape {got:?}, expected {expected}")]
    Shape {
        path: String,
        tensor: String,
        expected: String,
        got: Vec<usize>,
    },
    #[error("{path}: metadata '{key}': {msg}")]
    Meta {
        path: String,
        key: String,
        msg: String,
    },
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
}

pub(crate) fn os(path: &Path, source: std::io::Error) -> IoError {
    IoError::Os {
        path: path.display().to_string(),
        source,
    }
}
