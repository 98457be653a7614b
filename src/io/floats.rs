//! The float tensors of a file that a tool processes along their last axis in MX blocks
//! (`mxmoe quantize` takes the 2-D ones, `mxmoe qdq` all of them).

use super::{IoError, StFile};
use crate::format::BLOCK;
use safetensors::tensor::Dtype;

/// A float tensor read from a file, widened to f32.
#[derive(Clone, Debug)]
pub struct FloatTensor {
    pub name: String,
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
}

/// The float tensors named in `names` (all of them when empty, any rank), sorted by name; a
/// named tensor that is missing is an error.
pub fn float_tensors_named(
    f: &StFile,
    names: &[String],
    note: impl FnMut(&str),
) -> Result<Vec<FloatTensor>, IoError> {
    for n in names {
        if !f.has(n) {
            return Err(IoError::Missing {
                path: f.path.clone(),
                tensor: n.clone(),
                hint: format!(" (--tensor; the file has: {})", f.names().join(", ")),
            });
        }
    }
    float_tensors_in(f, false, names, note)
}

/// The float tensors (f32, bf16, f16) of `f`, sorted by name; with `two_d_only`, the 2-D ones.
/// Every other tensor is skipped with a `note` (e.g. `w.safetensors: skipping 'ids' (I32 is not
/// a float tensor)`). Errors: a taken tensor whose last dimension is not a multiple of 32, or no
/// tensor to take.
pub fn float_tensors(
    f: &StFile,
    two_d_only: bool,
    note: impl FnMut(&str),
) -> Result<Vec<FloatTensor>, IoError> {
    float_tensors_in(f, two_d_only, &[], note)
}

fn float_tensors_in(
    f: &StFile,
    two_d_only: bool,
    only: &[String],
    mut note: impl FnMut(&str),
) -> Result<Vec<FloatTensor>, IoError> {
    let invalid = |msg: String| IoError::Invalid {
        path: f.path.clone(),
        msg,
    };
    let mut out = Vec::new();
    for n in f.names_ref().iter().cloned() {
        if !only.is_empty() && !only.contains(&n) {
            continue;
        }
        let dt = f.dtype(&n)?;
        if !matches!(dt, Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            note(&format!(
                "{}: skipping '{n}' ({dt:?} is not a float tensor)",
                f.path
            ));
            continue;
        }
        let shape = f.shape(&n)?;
        if two_d_only && shape.len() != 2 {
            note(&format!(
                "{}: skipping '{n}' (shape {shape:?} is not 2-D)",
                f.path
            ));
            continue;
        }
        let k = shape.last().copied().unwrap_or(0);
        if k == 0 || k % BLOCK != 0 {
            return Err(invalid(format!("tensor '{n}' has shape {shape:?}: its last dimension {k} is not a multiple of the MX block size 32")));
        }
        let (data, shape) = f.floats(&n)?;
        out.push(FloatTensor {
            name: n,
            data,
            shape,
        });
    }
    if out.is_empty() {
        return Err(invalid(format!(
            "no {}float tensors to process (tensors: {})",
            if two_d_only { "2-D " } else { "" },
            super::stfile::list_names(f.names_ref())
        )));
    }
    Ok(out)
}
