//! gpt-oss expert tensors (Hugging Face `*_blocks` / `*_scales` and the original
//! `mlp1_weight.blocks` / `.scales`): `[E, N, K/32, 16]` FP4 blocks, low nibble first (the OCP
//! order we store, NUMERICS.md 9.1 and 11), `[E, N, K/32]` E8M0 scales. The names are in
//! `super::conventions`.

use super::conventions::{invalid, shape_err};
use super::model::Store;
use super::IoError;
use crate::format::{MxFormat, MxTensor, BLOCK};

/// A gpt-oss blocks tensor `[E, N, K/32, 16]` + scales `[E, N, K/32]` as an MX tensor
/// `[E, N, K]` (zero-copy: the bytes are already in our packing).
pub(crate) fn gptoss_mx(s: &Store, bn: &str, sn: &str) -> Result<MxTensor, IoError> {
    let f = s.file(bn)?;
    let (data, bs) = f.bytes_shared(bn)?;
    if bs.len() != 4 || bs[3] != 16 {
        return Err(shape_err(f, bn, "[E, N, K/32, 16]".into()));
    }
    let sf = s.file(sn)?;
    let (scales, ss) = sf.bytes_shared(sn)?;
    if ss != bs[..3] {
        return Err(shape_err(
            sf,
            sn,
            format!("{:?} (blocks.shape[:-1])", &bs[..3]),
        ));
    }
    MxTensor::new(
        MxFormat::Fp4E2M1,
        vec![bs[0], bs[1], bs[2] * BLOCK],
        data,
        scales,
    )
    .map_err(|e| invalid(&f.path, format!("{bn}: {e}")))
}
