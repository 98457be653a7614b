//! quantize / dequantize / QDQ on the GPU (shaders/quant.wgsl). Bit-exact against the CPU
//! reference: every exact step runs on u32 bit patterns. Inputs larger than one storage binding
//! are processed in chunks of whole blocks.

use super::context::Context;
use super::source::Shader;
use crate::backend::BackendError;
use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode, BLOCK};

/// Blocks per workgroup in quant.wgsl.
const BLOCKS_PER_WG: u64 = 8;

/// The largest chunk of blocks such that `bytes_per_block * blocks` fits a binding; a multiple
/// of 8 blocks so a chunk's scale bytes start on a word.
fn chunk_blocks(ctx: &Context, bytes_per_block: u64) -> usize {
    // Never more than u32 bytes per binding: the shader indexes with u32.
    let max = ctx.max_binding().min(super::layer::MAX_U32_BYTES) / bytes_per_block;
    ((max / BLOCKS_PER_WG) * BLOCKS_PER_WG).max(BLOCKS_PER_WG) as usize
}

/// Run one quant.wgsl entry over `n_blocks` blocks; returns the bytes of `outputs`.
fn dispatch(
    ctx: &Context,
    entry: &'static str,
    format: MxFormat,
    mode: ScaleMode,
    n_blocks: usize,
    inputs: &[(u32, &[u8])],
    outputs: &[(u32, u64)],
) -> Result<Vec<Vec<u8>>, BackendError> {
    let pipe = ctx.pipeline(
        Shader::Quant,
        entry,
        &[("FMT", format.id()), ("MODE", mode.id())],
    )?;
    let params = ctx.uniform(bytemuck::cast_slice(&[n_blocks as u32, 0, 0, 0]));
    let ins: Vec<(u32, wgpu::Buffer)> = inputs.iter().map(|(i, d)| (*i, ctx.upload(d))).collect();
    let outs: Vec<(u32, wgpu::Buffer)> = outputs
        .iter()
        .map(|(i, n)| {
            let b = ctx.storage(*n);
            ctx.maybe_poison(&b, *n);
            (*i, b)
        })
        .collect();
    let mut entries: Vec<(u32, &wgpu::Buffer)> = vec![(0, &params)];
    entries.extend(ins.iter().map(|(i, b)| (*i, b)));
    entries.extend(outs.iter().map(|(i, b)| (*i, b)));
    let bg = ctx.bind(&pipe, &entries);
    let mut enc = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(entry) });
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(entry),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[]);
        let (x, y) = ctx.grid((n_blocks as u64).div_ceil(BLOCKS_PER_WG) as u32);
        pass.dispatch_workgroups(x, y, 1);
    }
    let reads: Vec<(&wgpu::Buffer, u64)> = outs
        .iter()
        .zip(outputs)
        .map(|((_, b), (_, n))| (b, n.div_ceil(4) * 4))
        .collect();
    let res = ctx.submit_and_read(enc, &reads);
    drop(bg);
    ctx.give(ins.into_iter().map(|(_, b)| b));
    ctx.give(outs.into_iter().map(|(_, b)| b));
    ctx.give([params]);
    let mut res = res?;
    for (r, (_, n)) in res.iter_mut().zip(outputs) {
        r.truncate(*n as usize);
    }
    Ok(res)
}

pub fn quantize(
    ctx: &Context,
    format: MxFormat,
    mode: ScaleMode,
    x: &[f32],
    shape: &[usize],
) -> Result<MxTensor, BackendError> {
    let k = *shape.last().ok_or(FormatError::EmptyShape)?;
    if k == 0 || !k.is_multiple_of(BLOCK) {
        return Err(FormatError::NotBlockMultiple(k).into());
    }
    let n: usize = shape.iter().product();
    if x.len() != n {
        return Err(FormatError::BadLength {
            what: "input elements",
            expected: n,
            got: x.len(),
        }
        .into());
    }
    let blocks = n / BLOCK;
    let bb = format.spec().block_bytes();
    let per = chunk_blocks(ctx, (BLOCK * 4) as u64);
    let mut data = Vec::with_capacity(blocks * bb);
    let mut scales = Vec::with_capacity(blocks);
    let mut b0 = 0;
    while b0 < blocks {
        let nb = per.min(blocks - b0);
        let xs = &x[b0 * BLOCK..(b0 + nb) * BLOCK];
        let r = dispatch(
            ctx,
            "quantize",
            format,
            mode,
            nb,
            &[(1, bytemuck::cast_slice(xs))],
            &[(3, (nb * bb) as u64), (4, nb as u64)],
        )?;
        data.extend_from_slice(&r[0]);
        scales.extend_from_slice(&r[1]);
        b0 += nb;
    }
    Ok(MxTensor::new(format, shape.to_vec(), data, scales)?)
}

pub fn dequantize(ctx: &Context, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
    // Re-check the invariants (the fields are public) without copying the data.
    let k = *t.shape.last().ok_or(FormatError::EmptyShape)?;
    if k == 0 || !k.is_multiple_of(BLOCK) {
        return Err(FormatError::NotBlockMultiple(k).into());
    }
    let rows = t.rows();
    if t.data.len() != rows * t.format.packed_len(k) {
        return Err(FormatError::BadLength {
            what: "packed data",
            expected: rows * t.format.packed_len(k),
            got: t.data.len(),
        }
        .into());
    }
    if t.scales.len() != rows * (k / BLOCK) {
        return Err(FormatError::BadLength {
            what: "scales",
            expected: rows * (k / BLOCK),
            got: t.scales.len(),
        }
        .into());
    }
    let blocks = t.numel() / BLOCK;
    let bb = t.format.spec().block_bytes();
    let per = chunk_blocks(ctx, (BLOCK * 4) as u64);
    let mut out: Vec<f32> = Vec::with_capacity(t.numel());
    let mut b0 = 0;
    while b0 < blocks {
        let nb = per.min(blocks - b0);
        let r = dispatch(
            ctx,
            "dequantize",
            t.format,
            ScaleMode::Even,
            nb,
            &[
                (1, &t.data[b0 * bb..(b0 + nb) * bb]),
                (2, &t.scales[b0..b0 + nb]),
            ],
            &[(3, (nb * BLOCK * 4) as u64)],
        )?;
        out.extend(
            r[0].chunks_exact(4)
                .map(|c| f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        );
        b0 += nb;
    }
    Ok(out)
}

pub fn qdq(
    ctx: &Context,
    format: MxFormat,
    mode: ScaleMode,
    x: &[f32],
    k: usize,
) -> Result<Vec<f32>, BackendError> {
    if k == 0 || !k.is_multiple_of(BLOCK) {
        return Err(FormatError::NotBlockMultiple(k).into());
    }
    if !x.len().is_multiple_of(k) {
        return Err(FormatError::BadLength {
            what: "qdq input",
            expected: x.len().div_ceil(k) * k,
            got: x.len(),
        }
        .into());
    }
    let blocks = x.len() / BLOCK;
    let per = chunk_blocks(ctx, (BLOCK * 4) as u64);
    let mut out: Vec<f32> = Vec::with_capacity(x.len());
    let mut b0 = 0;
    while b0 < blocks {
        let nb = per.min(blocks - b0);
        let xs = &x[b0 * BLOCK..(b0 + nb) * BLOCK];
        let r = dispatch(
            ctx,
            "qdq",
            format,
            mode,
            nb,
            &[(1, bytemuck::cast_slice(xs))],
            &[(3, (nb * BLOCK * 4) as u64)],
        )?;
        out.extend(
            r[0].chunks_exact(4)
                .map(|c| f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        );
        b0 += nb;
    }
    Ok(out)
}
