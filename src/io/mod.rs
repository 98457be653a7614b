//! I/O: MX tensor files, layer bundles (vLLM/Quark names), gpt-oss checkpoints, token batches
//! and MoE results (ARCHITECTURE.md "File formats").
//!
//! Every error names the file, the tensor and what was expected. Writes are atomic: the bytes go
//! to a temporary file in the target's folder, which is renamed over the target only once
//! complete, so a failed run leaves no partial output.
//!
//! Modules: `stfile` (reading and writing safetensors files: `StFile`, `save`, `write_atomic`),
//! `mx` (MX tensor files), `batch` (token batches and MoE results), `layer` (layer bundles and
//! the loader's dispatch), `gptoss` (gpt-oss checkpoints), `floats` (float tensors for
//! quantize/qdq).

mod batch;
mod floats;
mod gptoss;
mod layer;
mod mx;
mod output;
mod stfile;
mod validate;

pub use batch::{load_batch, load_result, save_batch, save_result, MoeResult, TokenBatch};
pub use floats::{float_tensors, FloatTensor};
pub use layer::{load_layer, save_layer, LoadedLayer};
pub use mx::{load_mx, save_mx, MxTensors};
pub use output::{all_or_nothing, check_input, check_outputs, write_atomic};
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
