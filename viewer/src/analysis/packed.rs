//! What the packed weights themselves tell, without the unquantized weights (the common case:
//! MXFP4 checkpoints such as gpt-oss and every Quark export ship none): per expert and tensor,
//! the E8M0 scale exponents, the element codes (share of zeros, of ±max, of subnormals), the
//! largest |element| of each block (which betrays the scale rule), the spread of scale
//! exponents along each row, and the error of re-quantizing the dequantized weights under every
//! format and scale mode.
//!
//! Everything is a pure function of an [`MxTensor`]; the classes of a code come from the format
//! table (`decode_parts`, `max_normal`), never from a per-format `match`.

use mxmoe::format::{
    decode_elem_f64, e8m0_to_f32, quantize_block, unpack_codes, ElemKind, MxFormat, MxTensor,
    ScaleMode, BLOCK, SCALE_NAN,
};
use rayon::prelude::*;

/// What an element code stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeClass {
    /// ±0.
    Zero,
    /// A float code with a zero exponent field and a non-zero mantissa.
    Subnormal,
    /// Any other finite value below the format's largest magnitude.
    Normal,
    /// ±`max_normal` (or beyond it: MXINT8's -128/64): where clipped values land.
    Max,
    /// NaN or ±Inf codes (a quantizer never writes them).
    NonFinite,
}

impl CodeClass {
    pub const ALL: [CodeClass; 5] = [
        CodeClass::Zero,
        CodeClass::Subnormal,
        CodeClass::Normal,
        CodeClass::Max,
        CodeClass::NonFinite,
    ];
    pub fn name(self) -> &'static str {
        match self {
            CodeClass::Zero => "±0",
            CodeClass::Subnormal => "subnormal",
            CodeClass::Normal => "normal",
            CodeClass::Max => "±max",
            CodeClass::NonFinite => "NaN/Inf",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The class of `code` in `fmt` (from the format table: the decoded value, `max_normal`, and
/// the smallest normal `2^emin` of a float format).
pub fn code_class(fmt: MxFormat, code: u8) -> CodeClass {
    let spec = fmt.spec();
    let v = decode_elem_f64(fmt, code).abs();
    if !v.is_finite() {
        CodeClass::NonFinite
    } else if v == 0.0 {
        CodeClass::Zero
    } else if v >= spec.max_normal {
        CodeClass::Max
    } else if spec.kind == ElemKind::Float && v < 2f64.powi(spec.emin()) {
        CodeClass::Subnormal
    } else {
        CodeClass::Normal
    }
}

/// The distinct finite magnitudes of a format, ascending (`|value|` of the codes, no scale).
pub fn magnitudes(fmt: MxFormat) -> Vec<f64> {
    let mut m: Vec<f64> = (0..fmt.spec().n_codes())
        .map(|c| decode_elem_f64(fmt, c as u8).abs())
        .filter(|v| v.is_finite())
        .collect();
    m.sort_by(f64::total_cmp);
    m.dedup();
    m
}

/// Statistics of one packed tensor `[E, rows_per_expert, K]`.
#[derive(Clone, Debug)]
pub struct PackedTensor {
    /// `w13` or `w2`.
    pub name: &'static str,
    pub format: MxFormat,
    pub n_experts: usize,
    pub rows_per_expert: usize,
    pub k: usize,
    /// Blocks per E8M0 byte, per expert: `[E, 256]` row-major (exponent = byte - 127; byte
    /// 0xFF marks a NaN/Inf block).
    pub scale_hist: Vec<u64>,
    /// Elements per code, per expert: `[E, n_codes]` row-major.
    pub code_hist: Vec<u64>,
    /// Blocks per largest |element| (index into [`magnitudes`]), all experts; blocks with a
    /// NaN/Inf code or scale are not counted.
    pub block_max_hist: Vec<u64>,
    /// The format's magnitudes, the x axis of `block_max_hist`.
    pub magnitudes: Vec<f64>,
    /// Rows per exponent span (largest minus smallest finite scale exponent along the row),
    /// index = span, all experts.
    pub row_span_hist: Vec<u64>,
    /// Mean exponent span of the rows of each expert.
    pub row_span_mean: Vec<f32>,
}

impl PackedTensor {
    pub fn n_codes(&self) -> usize {
        self.format.spec().n_codes() as usize
    }
    /// Code counts of all experts together.
    pub fn code_total(&self) -> Vec<u64> {
        let n = self.n_codes();
        let mut t = vec![0u64; n];
        for e in self.code_hist.chunks_exact(n) {
            for (a, b) in t.iter_mut().zip(e) {
                *a += b;
            }
        }
        t
    }
    /// Elements per [`CodeClass`] (indexed by `CodeClass::index`) of expert `e`, or of all
    /// experts for `None`.
    pub fn class_counts(&self, e: Option<usize>) -> [u64; 5] {
        let n = self.n_codes();
        let hist = match e {
            Some(e) => self.code_hist[e * n..(e + 1) * n].to_vec(),
            None => self.code_total(),
        };
        let mut c = [0u64; 5];
        for (code, &cnt) in hist.iter().enumerate() {
            c[code_class(self.format, code as u8).index()] += cnt;
        }
        c
    }
    /// Share of expert `e`'s (or all) elements in `class`.
    pub fn class_share(&self, e: Option<usize>, class: CodeClass) -> f64 {
        let c = self.class_counts(e);
        let total: u64 = c.iter().sum();
        if total == 0 {
            0.0
        } else {
            c[class.index()] as f64 / total as f64
        }
    }
    /// Blocks per E8M0 byte of all experts.
    pub fn scale_total(&self) -> Vec<u64> {
        let mut t = vec![0u64; 256];
        for e in self.scale_hist.chunks_exact(256) {
            for (a, b) in t.iter_mut().zip(e) {
                *a += b;
            }
        }
        t
    }
    /// Blocks whose scale byte is 0xFF (NaN/Inf).
    pub fn nonfinite_blocks(&self) -> u64 {
        self.scale_total()[SCALE_NAN as usize]
    }
    /// The smallest and largest finite scale exponent of any block, if any.
    pub fn exp_range(&self) -> Option<(i32, i32)> {
        let t = self.scale_total();
        let lo = t[..255].iter().position(|&n| n > 0)?;
        let hi = t[..255].iter().rposition(|&n| n > 0)?;
        Some((lo as i32 - 127, hi as i32 - 127))
    }
    /// The per-expert exponent distribution as a matrix for a heatmap: rows = exponents from
    /// `hi` down to `lo` (top row = largest), columns = experts, value = the expert's share of
    /// blocks at that exponent. Returns `(lo, hi, values)`.
    pub fn exp_matrix(&self) -> Option<(i32, i32, Vec<f32>)> {
        let (lo, hi) = self.exp_range()?;
        let rows = (hi - lo + 1) as usize;
        let ne = self.n_experts;
        let mut v = vec![0f32; rows * ne];
        for e in 0..ne {
            let h = &self.scale_hist[e * 256..(e + 1) * 256];
            let total: u64 = h[..255].iter().sum();
            if total == 0 {
                continue;
            }
            for (r, x) in (lo..=hi).rev().enumerate() {
                v[r * ne + e] = h[(x + 127) as usize] as f32 / total as f32;
            }
        }
        Some((lo, hi, v))
    }
}

/// Scan a packed tensor of `n_experts` experts (its first dimension). Parallel over experts.
pub fn packed_tensor(name: &'static str, t: &MxTensor, n_experts: usize) -> PackedTensor {
    let fmt = t.format;
    let spec = fmt.spec();
    let k = t.k();
    let rows = t.rows();
    let ne = n_experts.max(1);
    let rpe = rows / ne;
    let nc = spec.n_codes() as usize;
    let mags = magnitudes(fmt);
    // Per code: its index in `mags`, or usize::MAX for NaN/Inf.
    let mag_idx: Vec<usize> = (0..nc)
        .map(|c| {
            let v = decode_elem_f64(fmt, c as u8).abs();
            if v.is_finite() {
                mags.iter().position(|&m| m == v).unwrap_or(usize::MAX)
            } else {
                usize::MAX
            }
        })
        .collect();
    // Per byte (4- and 8-bit codes): the largest magnitude rank of the codes it holds, with bit
    // 15 set when one of them is NaN/Inf.
    let rank = |c: usize| -> u16 {
        match mag_idx.get(c) {
            Some(&i) if i != usize::MAX => i as u16,
            _ => 0x8000,
        }
    };
    let byte_rank: Vec<u16> = (0..256usize)
        .map(|b| {
            if spec.code_bits == 4 {
                let (a, c) = (rank(b & 0xF), rank(b >> 4));
                (a & 0x7FFF).max(c & 0x7FFF) | ((a | c) & 0x8000)
            } else {
                rank(b)
            }
        })
        .collect();
    let rb = t.row_bytes();
    let sb = k / BLOCK;
    let bb = spec.block_bytes();
    let nibbles = spec.code_bits == 4;
    struct Part {
        scale: Vec<u64>,
        codes: Vec<u64>,
        bmax: Vec<u64>,
        span: Vec<u64>,
        span_sum: u64,
        span_rows: u64,
    }
    let parts: Vec<Part> = (0..ne)
        .into_par_iter()
        .map(|e| {
            let mut p = Part {
                scale: vec![0; 256],
                codes: vec![0; nc],
                bmax: vec![0; mags.len()],
                span: vec![0; 256],
                span_sum: 0,
                span_rows: 0,
            };
            // Byte histogram for 4- and 8-bit codes (each byte holds whole codes), turned
            // into code counts at the end; 6-bit codes are unpacked per block.
            let mut bytes = [0u64; 256];
            let mut codes = [0u8; BLOCK];
            for r in e * rpe..(e + 1) * rpe {
                let prow = &t.data[r * rb..(r + 1) * rb];
                let srow = &t.scales[r * sb..(r + 1) * sb];
                let (mut lo, mut hi) = (u8::MAX, 0u8);
                for (pb, &byte) in prow.chunks_exact(bb).zip(srow) {
                    p.scale[byte as usize] += 1;
                    if byte != SCALE_NAN {
                        lo = lo.min(byte);
                        hi = hi.max(byte);
                    }
                    let mut m = 0usize;
                    let mut bad = byte == SCALE_NAN;
                    if nibbles || spec.code_bits == 8 {
                        // Whole codes per byte: one table look-up per byte gives the largest
                        // magnitude rank it holds and whether it holds a NaN/Inf code.
                        let mut r = 0u16;
                        let mut flags = 0u16;
                        for &b in pb {
                            bytes[b as usize] += 1;
                            let x = byte_rank[b as usize];
                            r = r.max(x & 0x7FFF);
                            flags |= x;
                        }
                        m = r as usize;
                        bad |= flags & 0x8000 != 0;
                    } else {
                        let mut see = |c: usize| {
                            let i = mag_idx[c];
                            if i == usize::MAX {
                                bad = true;
                            } else {
                                m = m.max(i);
                            }
                        };
                        unpack_codes(fmt, pb, &mut codes);
                        for &c in &codes {
                            p.codes[c as usize] += 1;
                            see(c as usize);
                        }
                    }
                    if !bad {
                        p.bmax[m] += 1;
                    }
                }
                if lo <= hi {
                    let s = (hi - lo) as usize;
                    p.span[s] += 1;
                    p.span_sum += s as u64;
                    p.span_rows += 1;
                }
            }
            if nibbles {
                for (b, &n) in bytes.iter().enumerate() {
                    p.codes[b & 0xF] += n;
                    p.codes[b >> 4] += n;
                }
            } else if spec.code_bits == 8 {
                for (c, &n) in bytes.iter().enumerate() {
                    p.codes[c] += n;
                }
            }
            p
        })
        .collect();
    let mut out = PackedTensor {
        name,
        format: fmt,
        n_experts: ne,
        rows_per_expert: rpe,
        k,
        scale_hist: Vec::with_capacity(ne * 256),
        code_hist: Vec::with_capacity(ne * nc),
        block_max_hist: vec![0; mags.len()],
        magnitudes: mags,
        row_span_hist: vec![0; 256],
        row_span_mean: Vec::with_capacity(ne),
    };
    for p in parts {
        out.scale_hist.extend_from_slice(&p.scale);
        out.code_hist.extend_from_slice(&p.codes);
        for (a, b) in out.block_max_hist.iter_mut().zip(&p.bmax) {
            *a += b;
        }
        for (a, b) in out.row_span_hist.iter_mut().zip(&p.span) {
            *a += b;
        }
        out.row_span_mean.push(if p.span_rows > 0 {
            p.span_sum as f32 / p.span_rows as f32
        } else {
            0.0
        });
    }
    // Trim the span histogram to the largest span seen (at least one bin).
    let last = out.row_span_hist.iter().rposition(|&n| n > 0).unwrap_or(0);
    out.row_span_hist.truncate(last + 1);
    out
}

/// The error of re-quantizing the stored weights (dequantized, exactly) under every format and
/// scale mode, on a sample of rows: what converting the checkpoint would cost. A cell is 0 when
/// every sampled value is representable after re-quantization (e.g. MXFP4 into MXFP6 E2M3).
#[derive(Clone, Debug)]
pub struct Requant {
    pub name: &'static str,
    pub source: MxFormat,
    /// Rows sampled (every `stride`-th row of the tensor) and the tensor's rows.
    pub sampled_rows: usize,
    pub total_rows: usize,
    /// `[MxFormat::ALL.len()][ScaleMode::ALL.len()]`: relative L2 error of the re-quantized
    /// sample against the stored values.
    pub rel: Vec<[f64; 4]>,
    /// Share of sampled elements clipped to ±max by the re-quantization, same layout.
    pub saturated: Vec<[f64; 4]>,
}

impl Requant {
    pub fn formats(&self) -> &'static [MxFormat] {
        &MxFormat::ALL
    }
}

/// Rows to sample so that about `max_elems` elements are read: every `stride`-th row.
pub fn sample_stride(rows: usize, k: usize, max_elems: usize) -> usize {
    let total = rows.saturating_mul(k);
    if total <= max_elems || max_elems == 0 {
        1
    } else {
        total.div_ceil(max_elems)
    }
}

/// Re-quantize every `stride`-th row of `t` (dequantized) under every format and mode.
pub fn requant(name: &'static str, t: &MxTensor, max_elems: usize) -> Requant {
    let k = t.k();
    let rows = t.rows();
    let stride = sample_stride(rows, k, max_elems);
    let sampled: Vec<usize> = (0..rows).step_by(stride).collect();
    let nf = MxFormat::ALL.len();
    let nm = ScaleMode::ALL.len();
    // Per (format, mode): err2, x2, saturated count.
    let zero = || vec![(0f64, 0f64, 0u64); nf * nm];
    // Element values per code, per format (decoded once).
    let luts: Vec<Vec<f64>> = MxFormat::ALL
        .iter()
        .map(|&f| (0..256).map(|c| decode_elem_f64(f, c as u8)).collect())
        .collect();
    let sums = sampled
        .par_chunks(16)
        .map(|rs| {
            let mut acc = zero();
            let mut x = vec![0f32; k];
            let mut codes = [0u8; BLOCK];
            for &r in rs {
                t.dequantize_rows(r, &mut x);
                for (fi, &f) in MxFormat::ALL.iter().enumerate() {
                    let max = f.spec().max_normal;
                    let lut = &luts[fi];
                    for (mi, &m) in ScaleMode::ALL.iter().enumerate() {
                        let a = &mut acc[fi * nm + mi];
                        for xb in x.chunks_exact(BLOCK) {
                            let byte = quantize_block(f, m, xb, &mut codes);
                            if byte == SCALE_NAN {
                                continue;
                            }
                            let sc = e8m0_to_f32(byte) as f64;
                            for (&v, &c) in xb.iter().zip(&codes) {
                                let q = lut[c as usize] * sc;
                                let d = q - v as f64;
                                a.0 += d * d;
                                a.1 += v as f64 * v as f64;
                                if (v as f64).abs() > max * sc {
                                    a.2 += 1;
                                }
                            }
                        }
                    }
                }
            }
            acc
        })
        .reduce(zero, |mut a, b| {
            for (x, y) in a.iter_mut().zip(b) {
                x.0 += y.0;
                x.1 += y.1;
                x.2 += y.2;
            }
            a
        });
    let n = (sampled.len() * k).max(1) as f64;
    let mut rel = vec![[0f64; 4]; nf];
    let mut saturated = vec![[0f64; 4]; nf];
    for fi in 0..nf {
        for mi in 0..nm {
            let (e2, x2, s) = sums[fi * nm + mi];
            rel[fi][mi] = super::rel(e2, x2);
            saturated[fi][mi] = s as f64 / n;
        }
    }
    Requant {
        name,
        source: t.format,
        sampled_rows: sampled.len(),
        total_rows: rows,
        rel,
        saturated,
    }
}

/// `n` points of the distribution of the finite values of `v` (quantiles at `i / (n - 1)`,
/// nearest rank on the sorted values): a readable stand-in for a scatter of many values.
pub fn quantiles(v: &[f32], n: usize) -> Vec<f32> {
    let mut s: Vec<f32> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() || n == 0 {
        return Vec::new();
    }
    s.sort_by(f32::total_cmp);
    if n == 1 {
        return vec![s[s.len() / 2]];
    }
    (0..n)
        .map(|i| {
            let pos = i as f64 / (n - 1) as f64 * (s.len() - 1) as f64;
            s[pos.round() as usize]
        })
        .collect()
}

/// The packed view: both weight tensors' statistics, and their re-quantization errors.
#[derive(Clone, Debug)]
pub struct PackedView {
    pub n_experts: usize,
    pub w13: PackedTensor,
    pub w2: PackedTensor,
    pub requant13: Requant,
    pub requant2: Requant,
}

/// Elements each tensor's re-quantization table reads at most (a sample of rows beyond that).
pub const REQUANT_SAMPLE: usize = 1 << 20;

/// Both tensors of a layer's weights.
pub fn packed_view(w13: &MxTensor, w2: &MxTensor, n_experts: usize) -> PackedView {
    PackedView {
        n_experts,
        w13: packed_tensor("w13", w13, n_experts),
        w2: packed_tensor("w2", w2, n_experts),
        requant13: requant("w13", w13, REQUANT_SAMPLE),
        requant2: requant("w2", w2, REQUANT_SAMPLE),
    }
}

impl PackedView {
    pub fn csv(&self) -> String {
        let mut s = String::from("# packed weights: codes and scales as stored\n");
        s += "tensor,expert,zero_share,subnormal_share,max_share,nonfinite_share,mean_row_exponent_span\n";
        for t in [&self.w13, &self.w2] {
            for e in 0..t.n_experts {
                s += &format!(
                    "{},{e},{:e},{:e},{:e},{:e},{}\n",
                    t.name,
                    t.class_share(Some(e), CodeClass::Zero),
                    t.class_share(Some(e), CodeClass::Subnormal),
                    t.class_share(Some(e), CodeClass::Max),
                    t.class_share(Some(e), CodeClass::NonFinite),
                    t.row_span_mean[e]
                );
            }
        }
        s += "\n# E8M0 scale exponent histogram per expert\ntensor,expert,exponent,blocks\n";
        for t in [&self.w13, &self.w2] {
            for e in 0..t.n_experts {
                for (b, &n) in t.scale_hist[e * 256..(e + 1) * 256].iter().enumerate() {
                    if n > 0 {
                        s += &format!("{},{e},{},{n}\n", t.name, b as i32 - 127);
                    }
                }
            }
        }
        s += "\n# codes (all experts)\ntensor,code,value,class,elements\n";
        for t in [&self.w13, &self.w2] {
            for (c, &n) in t.code_total().iter().enumerate() {
                s += &format!(
                    "{},{c},{},{},{n}\n",
                    t.name,
                    decode_elem_f64(t.format, c as u8),
                    code_class(t.format, c as u8).name()
                );
            }
        }
        s += "\n# largest |element| per block\ntensor,magnitude,blocks\n";
        for t in [&self.w13, &self.w2] {
            for (m, &n) in t.magnitudes.iter().zip(&t.block_max_hist) {
                s += &format!("{},{m},{n}\n", t.name);
            }
        }
        s += "\n# rows per scale exponent span along the row\ntensor,span,rows\n";
        for t in [&self.w13, &self.w2] {
            for (sp, &n) in t.row_span_hist.iter().enumerate() {
                s += &format!("{},{sp},{n}\n", t.name);
            }
        }
        s += "\n# re-quantization of the stored values\ntensor,sampled_rows,total_rows,format,mode,rel_l2,saturated_share\n";
        for q in [&self.requant13, &self.requant2] {
            for (fi, f) in MxFormat::ALL.iter().enumerate() {
                for (mi, m) in ScaleMode::ALL.iter().enumerate() {
                    s += &format!(
                        "{},{},{},{},{},{:e},{:e}\n",
                        q.name,
                        q.sampled_rows,
                        q.total_rows,
                        f.name(),
                        m.name(),
                        q.rel[fi][mi],
                        q.saturated[fi][mi]
                    );
                }
            }
        }
        s
    }
}
