//! CPU-vs-wgpu agreement on the same inputs (ARCHITECTURE.md "Testing model").
//!
//! * quantize / dequantize / QDQ: BIT-EXACT (bits compared; any NaN equals any NaN) for every
//!   format x scale mode on special inputs: NaN/Inf blocks, zero and -0 blocks, fp32 subnormals,
//!   ties, saturating values, scale-edge amax values, random heavy-tailed and random-bit data.
//! * routing: exactly the CPU ids; weights within 1e-5 relative.
//! * MoE: relative L2 against `forward(.., Accumulate::F32)` within [`MOE_REL_L2`].
//!
//! Outputs are POISONED (0x7FC0DEAD) by the backend before every run, so an element a kernel
//! does not write fails. Without an adapter the tests print SKIPPED, and FAIL when
//! `MXMOE_REQUIRE_GPU=1` (CI).

use mxmoe::backend::wgpu::{MoePath, WgpuBackend};
use mxmoe::backend::BackendError;
use mxmoe::format::{MxFormat, MxTensor, ScaleMode, BLOCK};
use mxmoe::moe::synth::{synth_batch, synth_layer, Rng, SynthSpec};
use mxmoe::moe::{
    self, Accumulate, Activation, Intermediate, MoeLayer, MoeOptions, MoeOutput, RouterConfig,
    Scoring,
};
use mxmoe::scheme::Scheme;
use std::sync::OnceLock;
use std::time::Instant;

/// MoE outputs: relative L2 error bound against the f32 CPU reference, shared with
/// `mxmoe check` (2e-3). The GPU evaluates the activation in f32 (the CPU in f64) and sums in
/// another order, so an intermediate QDQ can round an element the other way at a code boundary.
/// Measured on lavapipe: worst 3.6e-7 over the scheme matrix.
const MOE_REL_L2: f64 = mxmoe::check::MOE_REL_L2;

/// With bf16 intermediates an element whose f32 value differs in the last bits can round to a
/// neighbouring bf16 (2^-8 relative), and the intermediate QDQ can amplify that to a code step.
const BF16_REL_L2: f64 = 1e-2;

static BACKEND: OnceLock<Option<WgpuBackend>> = OnceLock::new();

fn backend() -> Option<&'static WgpuBackend> {
    BACKEND
        .get_or_init(|| match WgpuBackend::new(None) {
            Ok(b) => {
                b.set_poison(true);
                eprintln!("wgpu adapter: {}", b.adapter());
                Some(b)
            }
            Err(e) => {
                if std::env::var("MXMOE_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                    panic!("MXMOE_REQUIRE_GPU=1 but no wgpu adapter: {e}");
                }
                None
            }
        })
        .as_ref()
}

macro_rules! gpu {
    ($name:expr) => {
        match backend() {
            Some(b) => b,
            None => {
                println!(
                    "SKIPPED {}: no wgpu adapter (set MXMOE_REQUIRE_GPU=1 to fail)",
                    $name
                );
                return;
            }
        }
    };
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn assert_bits(what: &str, cpu: &[f32], gpu: &[f32], input: &[f32]) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths");
    let bad: Vec<usize> = (0..cpu.len())
        .filter(|&i| !same_bits(cpu[i], gpu[i]))
        .collect();
    if let Some(&i) = bad.first() {
        let blk = i / BLOCK;
        panic!(
            "{what}: {} of {} elements differ; first at {i} (block {blk}): cpu {:#010x} gpu {:#010x} \
             input {:#010x}; block input {:08x?}",
            bad.len(),
            cpu.len(),
            cpu[i].to_bits(),
            gpu[i].to_bits(),
            input.get(i).map_or(0, |v| v.to_bits()),
            input.get(blk * BLOCK..(blk + 1) * BLOCK).map(|s| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        );
    }
}

/// Special and random blocks for a format: every block is 32 values.
fn special_inputs(fmt: MxFormat, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut v: Vec<f32> = Vec::new();
    fn push(v: &mut Vec<f32>, vals: &[f32], fill: f32) {
        let mut b = [fill; BLOCK];
        for (i, x) in vals.iter().enumerate().take(BLOCK) {
            b[i] = *x;
        }
        v.extend_from_slice(&b);
    }
    macro_rules! block {
        ($vals:expr, $fill:expr $(,)?) => {
            push(&mut v, $vals, $fill)
        };
    }
    let maxn = fmt.spec().max_normal as f32;
    // NaN / Inf blocks, zero blocks, signed zeros.
    block!(&[1.0, f32::NAN, 3.0], 0.5);
    block!(&[f32::INFINITY, -2.0], 1.0);
    block!(&[-1.0, f32::NEG_INFINITY], -0.0);
    block!(&[f32::from_bits(0xFFC0_0001)], 0.0);
    block!(&[], 0.0);
    block!(&[], -0.0);
    block!(&[0.0, -0.0, 0.0, -0.0], 0.0);
    // fp32 subnormals: tiny amax, the smallest subnormal, the normal boundary.
    block!(
        &[f32::from_bits(1), f32::from_bits(2), -f32::from_bits(3)],
        0.0
    );
    block!(
        &[
            f32::from_bits(0x7F_FFFF),
            f32::from_bits(0x40_0000),
            -f32::from_bits(0x40_0001)
        ],
        f32::from_bits(0x1234)
    );
    block!(
        &[
            f32::from_bits(0x80_0000),
            f32::from_bits(0x7F_FFFF),
            f32::from_bits(0x3F_FFFF)
        ],
        0.0
    );
    // Saturation and the scale edges.
    block!(&[maxn, -maxn, maxn * 1.0625, maxn * 1.5, maxn * 1.999], 0.0);
    block!(&[f32::MAX, -f32::MAX, 1.0], 0.0);
    block!(
        &[f32::from_bits(0x7F7F_FFFF), f32::from_bits(0x7F00_0000)],
        3.0
    );
    block!(&[f32::from_bits(0x437F_FFFF), 100.0, -37.0, 3.0], 0.0); // G8
    block!(&[f32::from_bits(0x4380_0001), 100.0], 0.0); // G9
    block!(&[7.0, -6.5, 3.25, 1.0], 0.0); // G7
    block!(
        &[
            5.0,
            0.25,
            0.75,
            1.25,
            1.75,
            2.5,
            3.5,
            -0.25,
            -0.75,
            -1.25,
            -2.5,
            -3.5,
            0.1,
            -0.1,
            f32::from_bits(0x3E80_0001),
            f32::from_bits(0x3E80_0004),
            4.75,
            5.5,
            -0.0,
            0.0,
        ],
        0.0,
    ); // G5
    block!(&[957.0, 957.0, 902.4, 960.0, 832.0, 291.7882], 1.0); // G10
                                                                 // Ties at every scale: odd multiples of a power of two around the element grid.
    for _ in 0..64 {
        let e = rng.below(40) as i32 - 20;
        let mut b = [0f32; BLOCK];
        for x in b.iter_mut() {
            let n = (2 * rng.below(64) + 1) as f32;
            let s = if rng.below(2) == 0 { 1.0 } else { -1.0 };
            *x = s * n * 2f32.powi(e - rng.below(6) as i32);
        }
        v.extend_from_slice(&b);
    }
    // amax just below / above powers of two and of max_normal * 2^k (RCeil, Even, Ceil edges).
    for k in -140i32..=120 {
        if k % 7 != 0 && k > -125 && k < 110 {
            continue;
        }
        let p = 2f64.powi(k);
        let a = (maxn as f64 * p) as f32;
        for d in [-2i32, -1, 0, 1, 2] {
            let bits = (a.to_bits() as i32 + d).max(1) as u32;
            let x = f32::from_bits(bits);
            let mut b = [0f32; BLOCK];
            b[0] = x;
            for (i, y) in b.iter_mut().enumerate().skip(1) {
                *y = x * ((i as f32) / 37.0) * if i % 3 == 0 { -1.0 } else { 1.0 };
            }
            v.extend_from_slice(&b);
        }
        let q = p as f32;
        if q.is_finite() && q > 0.0 {
            for d in [-1i32, 0, 1] {
                let x = f32::from_bits((q.to_bits() as i32 + d).max(1) as u32);
                block!(&[x, -x * 0.3], x * 0.01);
            }
        }
    }
    // Random bit patterns over the whole finite range (every exponent, subnormals included).
    for _ in 0..256 {
        let e = rng.below(255) as u32; // never 255: finite
        let mut b = [0f32; BLOCK];
        for x in b.iter_mut() {
            let ee = e.saturating_sub(rng.below(30) as u32);
            let bits = (rng.next_u64() as u32 & 0x807F_FFFF) | (ee << 23);
            *x = f32::from_bits(bits);
        }
        v.extend_from_slice(&b);
    }
    // Heavy-tailed data at several scales.
    for sc in [1e-30f64, 1e-3, 1.0, 37.0, 1e6, 1e30] {
        for _ in 0..32 * 16 {
            v.push((rng.heavy() * sc) as f32);
        }
    }
    v
}

/// Prepare and run once on the wgpu backend.
fn once(
    b: &WgpuBackend,
    layer: &MoeLayer,
    hs: &[f32],
    logits: &[f32],
    opts: MoeOptions,
) -> Result<MoeOutput, BackendError> {
    let g = b.prepare(layer)?;
    Ok(b.moe(&g, hs, logits, opts, false)?.0)
}

#[test]
fn qdq_bit_exact_all_formats_modes() {
    let b = gpu!("qdq_bit_exact_all_formats_modes");
    let t = Instant::now();
    for f in MxFormat::ALL {
        let x = special_inputs(f, 11 + f.id() as u64);
        for m in ScaleMode::ALL {
            let cpu = mxmoe::format::qdq_slice(f, m, &x, 64).unwrap();
            let gpu = b.qdq(f, m, &x, 64).unwrap();
            assert_bits(&format!("qdq/{f}/{m}"), &cpu, &gpu, &x);
        }
    }
    eprintln!("qdq: {:?}", t.elapsed());
}

#[test]
fn quantize_bit_exact_all_formats_modes() {
    let b = gpu!("quantize_bit_exact_all_formats_modes");
    for f in MxFormat::ALL {
        let mut x = special_inputs(f, 23 + f.id() as u64);
        x.resize(x.len().next_multiple_of(96), -0.0);
        let shape = [x.len() / 96, 96];
        for m in ScaleMode::ALL {
            let cpu = MxTensor::quantize(f, m, &x, &shape).unwrap();
            let gpu = b.quantize(f, m, &x, &shape).unwrap();
            assert_eq!(cpu.shape, gpu.shape);
            if let Some(i) = (0..cpu.scales.len()).find(|&i| cpu.scales[i] != gpu.scales[i]) {
                panic!(
                    "quantize/{f}/{m}: scale byte {i} cpu {} gpu {}; block {:08x?}",
                    cpu.scales[i],
                    gpu.scales[i],
                    x[i * 32..i * 32 + 32]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>()
                );
            }
            let bb = f.spec().block_bytes();
            if let Some(i) = (0..cpu.data.len()).find(|&i| cpu.data[i] != gpu.data[i]) {
                let blk = i / bb;
                panic!(
                    "quantize/{f}/{m}: data byte {i} (block {blk}) cpu {:#04x} gpu {:#04x}; block {:08x?}",
                    cpu.data[i],
                    gpu.data[i],
                    x[blk * 32..blk * 32 + 32].iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }
}

/// A sweep of block maxima over the whole finite fp32 range (subnormals included, every binade,
/// many mantissas), each block's other elements random fractions of it with random signs:
/// scale bytes and codes bit-exact for every format and mode.
#[test]
fn quantize_amax_sweep_bit_exact() {
    let b = gpu!("quantize_amax_sweep_bit_exact");
    let mut rng = Rng::new(77);
    let blocks = 16384usize;
    let mut x = Vec::with_capacity(blocks * BLOCK);
    for i in 0..blocks {
        // 0x7F7FFFFF / 16384 ~ 0x7FE0: stride through every exponent, jittered mantissas.
        let amax =
            ((i as u32).wrapping_mul(0x7FE0) ^ (rng.next_u64() as u32 & 0x1FFF)).min(0x7F7F_FFFF);
        let a = f32::from_bits(amax.max(1));
        let p = rng.below(BLOCK);
        for j in 0..BLOCK {
            let v = if j == p {
                a
            } else {
                let f = f32::from_bits(rng.next_u64() as u32 & 0x3F7F_FFFF); // [0, 1)
                a * f
            };
            x.push(if rng.below(2) == 0 { v } else { -v });
        }
    }
    let shape = [blocks / 4, 4 * BLOCK];
    for f in MxFormat::ALL {
        for m in ScaleMode::ALL {
            let cpu = MxTensor::quantize(f, m, &x, &shape).unwrap();
            let gpu = b.quantize(f, m, &x, &shape).unwrap();
            if let Some(i) = (0..cpu.scales.len()).find(|&i| cpu.scales[i] != gpu.scales[i]) {
                panic!(
                    "sweep {f}/{m}: scale {i}: cpu {} gpu {}, block {:08x?}",
                    cpu.scales[i],
                    gpu.scales[i],
                    x[i * 32..i * 32 + 32]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>()
                );
            }
            assert!(cpu.data == gpu.data, "sweep {f}/{m}: codes differ");
        }
    }
}

#[test]
fn dequantize_bit_exact_all_formats() {
    let b = gpu!("dequantize_bit_exact_all_formats");
    let mut rng = Rng::new(5);
    for f in MxFormat::ALL {
        let rows = 97;
        let k = 64;
        let mut data = vec![0u8; rows * f.packed_len(k)];
        data.iter_mut().for_each(|d| *d = rng.next_u64() as u8);
        // Every scale byte appears, including 0 (2^-127), 254 and 255 (NaN).
        let scales: Vec<u8> = (0..rows * k / 32).map(|i| (i * 37 % 256) as u8).collect();
        let t = MxTensor::new(f, vec![rows, k], data, scales).unwrap();
        let cpu = t.dequantize();
        let gpu = b.dequantize(&t).unwrap();
        assert_bits(&format!("dequantize/{f}"), &cpu, &gpu, &[]);
        // Every code of the format at every scale byte, one block per (scale, code group).
        let n = f.spec().n_codes() as usize;
        let mut codes = Vec::new();
        let mut sc = Vec::new();
        for s in 0..256usize {
            for g in 0..n.div_ceil(32) {
                for j in 0..32 {
                    codes.push(((g * 32 + j) % n) as u8);
                }
                sc.push(s as u8);
            }
        }
        let mut packed = vec![0u8; f.packed_len(codes.len())];
        mxmoe::format::pack_codes(f, &codes, &mut packed);
        let t = MxTensor::new(f, vec![codes.len() / 32, 32], packed, sc).unwrap();
        assert_bits(
            &format!("dequantize-all-codes/{f}"),
            &t.dequantize(),
            &b.dequantize(&t).unwrap(),
            &[],
        );
    }
}

#[test]
fn routing_exact_ids() {
    let b = gpu!("routing_exact_ids");
    for (e, k, m) in [
        (8usize, 1usize, 1usize),
        (8, 2, 17),
        (16, 8, 64),
        (64, 4, 33),
        (128, 8, 5),
    ] {
        let (_, mut logits) = synth_batch(m, 32, e, 3 + e as u64);
        // Exact ties (ties to the lower index) in the first token.
        logits[1] = logits[0];
        logits[e - 1] = logits[0];
        for scoring in [Scoring::Softmax, Scoring::TopkSoftmax, Scoring::Sigmoid] {
            for renormalize in [false, true] {
                for group in [None, Some((4usize, 2usize))] {
                    if group.is_some_and(|(g, tg)| k > tg * (e / g)) {
                        continue;
                    }
                    let cfg = RouterConfig {
                        scoring,
                        top_k: k,
                        renormalize,
                        n_group: group.map(|g| g.0),
                        topk_group: group.map(|g| g.1),
                        routed_scaling_factor: if renormalize { 2.5 } else { 1.0 },
                        apply_router_weight_on_input: false,
                    };
                    let cpu = moe::route(&cfg, &logits, e, None).unwrap();
                    let gpu = b.route(&cfg, &logits, e, None).unwrap();
                    assert_eq!(cpu.topk_ids, gpu.topk_ids, "ids: {cfg:?} e={e} m={m}");
                    for (c, g) in cpu.topk_weights.iter().zip(&gpu.topk_weights) {
                        assert!(
                            (c - g).abs() <= 1e-5 * c.abs().max(1e-6),
                            "weights {c} vs {g}: {cfg:?}"
                        );
                    }
                }
            }
        }
    }
    // Top-k-then-softmax ignores a correction bias, as the CPU does; a NaN bias is an error.
    let cfg = RouterConfig {
        scoring: Scoring::TopkSoftmax,
        top_k: 2,
        ..RouterConfig::default()
    };
    let lg = [0.5f32, -1.0, 2.0, 0.25, 1.0, 0.0, -2.0, 3.0];
    let bias = vec![10.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let cpu = moe::route(&cfg, &lg, 8, Some(&bias)).unwrap();
    assert_eq!(cpu.topk_ids, vec![7, 2]);
    assert_eq!(
        b.route(&cfg, &lg, 8, Some(&bias)).unwrap().topk_ids,
        cpu.topk_ids
    );
    let mut nan = bias.clone();
    nan[3] = f32::NAN;
    assert!(b
        .route(&RouterConfig::default(), &lg, 8, Some(&nan))
        .is_err());
}

/// The GPU's exact_sigmoid (shaders/exact_math.wgsl) gives the bits of the CPU's
/// `moe::exact_math::sigmoid` on a dense sweep of f32 inputs (every 509th bit pattern with |x| in
/// [2^-34, 128] of both signs, plus edges). Read through the public route op: sigmoid scoring,
/// top_k = E = 32, no renormalization, scaling 1, so the weights are the sigmoids themselves.
#[test]
fn sigmoid_matches_cpu_bit_for_bit() {
    let b = gpu!("sigmoid_matches_cpu_bit_for_bit");
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        1e-40,
        -1e-40,
        5e-11,
        -5e-11,
        1.2e-10,
        -1.2e-10,
        1.0,
        -1.0,
        17.33,
        17.34,
        -87.33,
        -87.34,
        -103.27,
        -103.28,
        -103.97,
        -103.98,
        -104.0,
        127.99,
        -127.99,
        128.0,
        -128.0,
        1e30,
        -1e30,
        f32::MAX,
        f32::MIN,
    ];
    for sign in [0u32, 0x8000_0000] {
        for bits in (0x2E80_0000u32..0x4300_0100).step_by(509) {
            xs.push(f32::from_bits(bits | sign));
        }
    }
    let mut rng = Rng::new(5);
    while !xs.len().is_multiple_of(32) {
        xs.push((rng.normal() * 8.0) as f32);
    }
    let cfg = RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k: 32,
        renormalize: false,
        n_group: None,
        topk_group: None,
        routed_scaling_factor: 1.0,
        apply_router_weight_on_input: false,
    };
    let t = Instant::now();
    let gpu = b.route(&cfg, &xs, 32, None).unwrap();
    eprintln!("{} sigmoids on the GPU in {:?}", xs.len(), t.elapsed());
    let mut subnormal_flushed = 0;
    for (slot, (&id, &w)) in gpu.topk_ids.iter().zip(&gpu.topk_weights).enumerate() {
        let x = xs[slot / 32 * 32 + id as usize];
        let want = moe::exact_math::sigmoid(x);
        if want.is_subnormal() && w == 0.0 {
            subnormal_flushed += 1; // the adapter flushes subnormal products
            continue;
        }
        assert!(
            want.to_bits() == w.to_bits(),
            "sigmoid({x:e} = {:#010x}): CPU {want:e} ({:#010x}), GPU {w:e} ({:#010x})",
            x.to_bits(),
            want.to_bits(),
            w.to_bits()
        );
    }
    eprintln!("{subnormal_flushed} subnormal results flushed by the adapter");
}

/// Adversarial DeepSeek-V3 routing (sigmoid + e_score_correction_bias + groups; and softmax +
/// bias): exact ties in the keys (saturated sigmoids, equal biases, logits one ulp apart,
/// |x| < 2^-33), underflowing scores, subnormal and equal biases, groups of one expert. Ids
/// exactly the CPU's; weights (renormalized scores times the scaling factor) bit for bit.
#[test]
fn routing_deepseek_adversarial_exact() {
    let b = gpu!("routing_deepseek_adversarial_exact");
    let mut rng = Rng::new(17);
    for (e, k, group) in [
        (16usize, 4usize, Some((4usize, 2usize))),
        (16, 4, Some((16, 4))),
        (16, 1, None),
        (64, 8, Some((8, 4))),
        (64, 6, Some((32, 3))),
        (256, 8, Some((8, 4))),
        (256, 32, None),
    ] {
        let m = 48;
        let mut logits = Vec::with_capacity(m * e);
        for t in 0..m {
            let base = (rng.normal() * 3.0) as f32;
            for i in 0..e {
                let v = match t % 8 {
                    // One-ulp neighbours around a random value.
                    0 => f32::from_bits(base.to_bits().wrapping_add((i % 5) as u32)),
                    // Saturated: sigmoid = 1.0 for all, the bias decides (then the index).
                    1 => 20.0 + (i % 7) as f32 * 10.0,
                    // Underflowing: subnormal or zero sigmoids.
                    2 => -86.0 - (i % 11) as f32 * 2.0,
                    // All equal.
                    3 => base,
                    // Below 2^-33: sigmoid = 0.5 exactly.
                    4 => (rng.normal() * 1e-11) as f32,
                    // Two values only.
                    5 => [0.5f32, -0.5][i % 2],
                    // Heavy tails.
                    6 => (rng.normal() * rng.normal() * 6.0) as f32,
                    _ => (rng.normal() * 2.0) as f32,
                };
                logits.push(v);
            }
        }
        let biases: Vec<Vec<f32>> = vec![
            vec![0.0; e],
            vec![0.125; e],
            (0..e).map(|_| (rng.normal() * 0.1) as f32).collect(),
            // Few distinct values: many equal biases.
            (0..e).map(|i| [0.0f32, 0.25, -0.25][i % 3]).collect(),
            // One-ulp differences and subnormals.
            (0..e)
                .map(|i| match i % 4 {
                    0 => f32::from_bits(1 + i as u32),
                    1 => -f32::from_bits(7),
                    2 => f32::from_bits(0x3DCC_CCCD + (i % 3) as u32),
                    _ => 0.1,
                })
                .collect(),
        ];
        for (bias, scoring) in biases.iter().flat_map(|b| {
            [Scoring::Sigmoid, Scoring::Softmax]
                .into_iter()
                .map(move |s| (b, s))
        }) {
            for renormalize in [true, false] {
                let cfg = RouterConfig {
                    scoring,
                    top_k: k,
                    renormalize,
                    n_group: group.map(|g| g.0),
                    topk_group: group.map(|g| g.1),
                    routed_scaling_factor: 2.5,
                    apply_router_weight_on_input: false,
                };
                let cpu = moe::route(&cfg, &logits, e, Some(bias)).unwrap();
                let gpu = b.route(&cfg, &logits, e, Some(bias)).unwrap();
                for t in 0..m {
                    let s = t * k..(t + 1) * k;
                    assert_eq!(
                        cpu.topk_ids[s.clone()],
                        gpu.topk_ids[s.clone()],
                        "ids: {scoring} e={e} k={k} groups {group:?} token {t} (kind {}) bias {:?}",
                        t % 8,
                        &bias[..4]
                    );
                    // Weights bit for bit unless subnormal scores are involved (an adapter may
                    // flush them in the renormalizing sum).
                    let row = &logits[t * e..(t + 1) * e];
                    let scores = match scoring {
                        Scoring::Sigmoid => {
                            row.iter().map(|&x| moe::exact_math::sigmoid(x)).collect()
                        }
                        _ => moe::exact_math::softmax(row),
                    };
                    let tiny = cpu.topk_ids[s.clone()]
                        .iter()
                        .any(|&i| scores[i as usize] < 1e-30);
                    if !tiny {
                        for j in s {
                            assert_eq!(
                                cpu.topk_weights[j].to_bits(),
                                gpu.topk_weights[j].to_bits(),
                                "weight {j}: {} vs {} ({scoring} e={e} k={k} renormalize \
                                 {renormalize})",
                                cpu.topk_weights[j],
                                gpu.topk_weights[j]
                            );
                        }
                    }
                }
            }
        }
    }
}

fn rel_l2(cpu: &[f32], gpu: &[f32]) -> f64 {
    let mut num = 0f64;
    let mut den = 0f64;
    for (c, g) in cpu.iter().zip(gpu) {
        let d = *c as f64 - *g as f64;
        num += d * d;
        den += (*c as f64) * (*c as f64);
    }
    if !num.is_finite() {
        return f64::INFINITY;
    }
    (num / den.max(1e-300)).sqrt()
}

fn check_moe(b: &WgpuBackend, layer: &MoeLayer, m: usize, seed: u64, what: &str) -> f64 {
    let (hs, logits) = synth_batch(m, layer.config.hidden, layer.config.n_experts, seed);
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
    };
    let cpu = moe::forward(layer, &hs, &logits, opts).unwrap();
    let g = b.prepare(layer).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut worst = 0f64;
    for path in [MoePath::Gemm, MoePath::Gemv] {
        let what = format!("{what}/{path:?}");
        let t = Instant::now();
        let gpu = b
            .moe_path(&g, &hs, &logits, opts, path, false)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .0;
        if std::env::var("MXMOE_TEST_TIMES").is_ok() {
            eprintln!("{what}: {:?}", t.elapsed());
        }
        assert_eq!(
            cpu.routing.topk_ids, gpu.routing.topk_ids,
            "{what}: routing ids"
        );
        assert_eq!(gpu.output.len(), cpu.output.len());
        if let Some(i) = gpu.output.iter().position(|v| v.to_bits() == 0x7FC0_DEAD) {
            panic!("{what}: output element {i} was never written (poison)");
        }
        let r = rel_l2(&cpu.output, &gpu.output);
        assert!(
            r <= MOE_REL_L2,
            "{what}: relative L2 {r:e} > {MOE_REL_L2:e}"
        );
        worst = worst.max(r);
    }
    worst
}

fn spec(scheme: Scheme, act: Activation, e: usize, h: usize, i: usize, k: usize) -> SynthSpec {
    let mut s = SynthSpec::new(scheme, e, h, i, k);
    s.activation = act;
    s
}

#[test]
fn moe_all_ocp_schemes_both_activations() {
    let b = gpu!("moe_all_ocp_schemes_both_activations");
    let mut schemes: Vec<Scheme> = Scheme::OCP_MX.to_vec();
    schemes.push(Scheme::new(MxFormat::Fp4E2M1, None));
    let mut worst = 0f64;
    let t = Instant::now();
    for (si, &scheme) in schemes.iter().enumerate() {
        for act in [Activation::Silu, Activation::SwigluOai] {
            let mut sp = spec(scheme, act, 8, 96, 64, 2);
            sp.bias = si % 2 == 0;
            sp.seed = 100 + si as u64;
            let layer = synth_layer(&sp).unwrap().layer;
            for m in [1usize, 3, 17, 64] {
                let what = format!("{scheme}/{act}/M={m}/bias={}", sp.bias);
                worst = worst.max(check_moe(b, &layer, m, 7 + m as u64, &what));
            }
        }
    }
    eprintln!(
        "moe schemes: worst relative L2 {worst:e} ({:?})",
        t.elapsed()
    );
}

#[test]
fn moe_topk_1_and_8_other_formats() {
    let b = gpu!("moe_topk_1_and_8_other_formats");
    let cases = [
        (
            Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp4E2M1)),
            1usize,
        ),
        (Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp6E2M3)), 8),
        (Scheme::new(MxFormat::Fp8E4M3, Some(MxFormat::Fp8E4M3)), 8),
        (Scheme::new(MxFormat::Fp8E5M2, Some(MxFormat::Fp8E5M2)), 2),
        (Scheme::new(MxFormat::Int8, Some(MxFormat::Int8)), 4),
        (Scheme::new(MxFormat::Fp6E3M2, None), 8),
    ];
    for (scheme, k) in cases {
        let mut sp = spec(scheme, Activation::Silu, 16, 64, 96, k);
        sp.bias = true;
        let layer = synth_layer(&sp).unwrap().layer;
        for m in [1usize, 17, 64] {
            check_moe(b, &layer, m, 31, &format!("{scheme}/k={k}/M={m}"));
        }
    }
}

#[test]
fn moe_expert_map_router_weight_on_input_and_scoring() {
    let b = gpu!("moe_expert_map_router_weight_on_input_and_scoring");
    let scheme = Scheme::OCP_MX[0];
    // expert_map: 16 router experts, 8 local (even ids), the rest elsewhere.
    let mut sp = spec(scheme, Activation::SwigluOai, 8, 64, 64, 4);
    sp.bias = true;
    let mut layer = synth_layer(&sp).unwrap().layer;
    layer.config.n_experts = 16;
    layer.weights.expert_map = Some(
        (0..16)
            .map(|g| if g % 2 == 0 { g / 2 } else { -1 })
            .collect(),
    );
    for m in [1usize, 3, 17] {
        check_moe(b, &layer, m, 41, &format!("expert_map/M={m}"));
    }
    // apply_router_weight_on_input (top-1), sigmoid scoring, floor activation scales.
    let mut sp = spec(scheme, Activation::Silu, 8, 64, 64, 1);
    sp.router.apply_router_weight_on_input = true;
    sp.router.scoring = Scoring::Sigmoid;
    let mut layer = synth_layer(&sp).unwrap().layer;
    layer.config.act_scale_mode = ScaleMode::Floor;
    for m in [1usize, 17] {
        check_moe(b, &layer, m, 43, &format!("on_input/sigmoid/M={m}"));
    }
    // gpt-oss routing (top-k then softmax), grouped softmax routing, rceil scales.
    let mut sp = spec(Scheme::OCP_MX[1], Activation::SwigluOai, 16, 64, 64, 4);
    sp.router.scoring = Scoring::TopkSoftmax;
    let mut layer = synth_layer(&sp).unwrap().layer;
    layer.config.act_scale_mode = ScaleMode::RCeil;
    check_moe(b, &layer, 17, 47, "topk_softmax/rceil");
    layer.config.router.scoring = Scoring::Softmax;
    layer.config.router.n_group = Some(4);
    layer.config.router.topk_group = Some(2);
    check_moe(b, &layer, 17, 53, "grouped");
}

/// More rows per expert than one GEMM tile (64): several tiles of one expert, the last partial.
#[test]
fn moe_many_rows_per_expert() {
    let b = gpu!("moe_many_rows_per_expert");
    let mut sp = spec(Scheme::OCP_MX[2], Activation::SwigluOai, 4, 96, 96, 2);
    sp.bias = true;
    let layer = synth_layer(&sp).unwrap().layer;
    check_moe(b, &layer, 200, 77, "200 tokens on 4 experts");
}

/// gpt-oss-like awkward sizes: H = 2880 (90 blocks: not a multiple of the 256-element GEMV
/// chunk nor of the 128-column GEMM2 tile), I = 704, top-k-then-softmax router, swigluoai,
/// weight-only MXFP4 with biases.
#[test]
fn moe_gpt_oss_like_dims() {
    let b = gpu!("moe_gpt_oss_like_dims");
    let mut sp = spec(
        Scheme::new(MxFormat::Fp4E2M1, None),
        Activation::SwigluOai,
        4,
        2880,
        704,
        2,
    );
    sp.bias = true;
    sp.router.scoring = Scoring::TopkSoftmax;
    sp.router.renormalize = false;
    let layer = synth_layer(&sp).unwrap().layer;
    check_moe(b, &layer, 3, 5, "gpt-oss dims");
}

/// `Intermediate::Bf16` (vLLM parity): bf16 rounding after the GEMM1 epilogue, the activation,
/// the GEMM2 epilogue and the final sum, as the CPU reference does.
#[test]
fn moe_bf16_intermediates() {
    let b = gpu!("moe_bf16_intermediates");
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::Bf16,
        taps: false,
    };
    for (scheme, act) in [
        (Scheme::OCP_MX[0], Activation::Silu),
        (Scheme::new(MxFormat::Fp4E2M1, None), Activation::SwigluOai),
    ] {
        let mut sp = spec(scheme, act, 8, 64, 96, 2);
        sp.bias = true;
        let layer = synth_layer(&sp).unwrap().layer;
        let (hs, logits) = synth_batch(17, 64, 8, 5);
        let cpu = moe::forward(&layer, &hs, &logits, opts).unwrap();
        let gpu = once(&b, &layer, &hs, &logits, opts).unwrap();
        assert!(
            gpu.output.iter().all(|v| v.to_bits() & 0xFFFF == 0),
            "outputs are bf16 values"
        );
        let r = rel_l2(&cpu.output, &gpu.output);
        eprintln!("bf16 {scheme}/{act}: relative L2 {r:e}");
        assert!(
            r <= BF16_REL_L2,
            "bf16 {scheme}/{act}: relative L2 {r:e} > {BF16_REL_L2:e}"
        );
    }
}

/// DeepSeek-V3 routing (sigmoid + e_score_correction_bias + groups + scaling) inside the MoE
/// forward: the route pass computes the CPU's ids on the GPU (exact sigmoid keys).
#[test]
fn moe_deepseek_router_with_correction_bias() {
    let b = gpu!("moe_deepseek_router_with_correction_bias");
    let mut sp = spec(Scheme::OCP_MX[0], Activation::Silu, 16, 64, 64, 4);
    sp.router = RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k: 4,
        renormalize: true,
        n_group: Some(4),
        topk_group: Some(2),
        routed_scaling_factor: 2.5,
        apply_router_weight_on_input: false,
    };
    let mut layer = synth_layer(&sp).unwrap().layer;
    let mut rng = Rng::new(9);
    layer.weights.e_score_correction_bias =
        Some((0..16).map(|_| (rng.normal() * 0.1) as f32).collect());
    for m in [1usize, 17] {
        check_moe(b, &layer, m, 71, &format!("deepseek/M={m}"));
    }
}

/// A DeepSeek-V3-shaped layer (64 experts in 8 groups, 4 groups eligible, top-8, scaling 2.5,
/// MXFP4 weights) on the GPU end to end: routing ids exact and routing weights bit for bit
/// against the CPU, outputs within the MoE tolerance, on both expert paths.
#[test]
fn moe_deepseek_shaped_forward() {
    let b = gpu!("moe_deepseek_shaped_forward");
    let mut sp = spec(Scheme::OCP_MX[0], Activation::Silu, 64, 64, 64, 8);
    sp.router = RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k: 8,
        renormalize: true,
        n_group: Some(8),
        topk_group: Some(4),
        routed_scaling_factor: 2.5,
        apply_router_weight_on_input: false,
    };
    let mut layer = synth_layer(&sp).unwrap().layer;
    let mut rng = Rng::new(23);
    // Random biases with a run of equal ones (ties between saturated experts).
    let mut bias: Vec<f32> = (0..64).map(|_| (rng.normal() * 0.1) as f32).collect();
    bias[8..16].fill(0.05);
    layer.weights.e_score_correction_bias = Some(bias);
    for m in [1usize, 5, 33] {
        check_moe(
            b,
            &layer,
            m,
            90 + m as u64,
            &format!("deepseek-shaped/M={m}"),
        );
    }
    let (hs, mut logits) = synth_batch(9, 64, 64, 7);
    logits[..64].fill(30.0); // token 0: every sigmoid saturates to 1.0
    let cpu = moe::forward(&layer, &hs, &logits, MoeOptions::default()).unwrap();
    let gpu = once(b, &layer, &hs, &logits, MoeOptions::default()).unwrap();
    assert_eq!(cpu.routing.topk_ids, gpu.routing.topk_ids);
    let bits = |v: &[f32]| v.iter().map(|w| w.to_bits()).collect::<Vec<u32>>();
    assert_eq!(
        bits(&cpu.routing.topk_weights),
        bits(&gpu.routing.topk_weights),
        "routing weights bit for bit"
    );
}

/// Weights split across several buffers (a chunk-size override far below the binding limit):
/// the layer must give the same result as unsplit. Uses its own backend instance, so the
/// override does not leak into the other tests.
#[test]
fn moe_weights_split_across_buffers() {
    if backend().is_none() {
        println!("SKIPPED moe_weights_split_across_buffers: no wgpu adapter");
        return;
    }
    let b = WgpuBackend::new(None).unwrap();
    b.set_poison(true);
    let sp = spec(Scheme::OCP_MX[3], Activation::Silu, 8, 64, 64, 4);
    let layer = synth_layer(&sp).unwrap().layer;
    let per_expert = (layer.weights.w13.data.len() / 8).max(layer.weights.w2.data.len() / 8) as u64;
    b.set_max_chunk_bytes(per_expert * 3);
    let g = b.prepare(&layer).unwrap();
    assert_eq!(g.chunks(), 3, "8 experts, 3 per chunk");
    check_moe(&b, &layer, 17, 61, "split weights");
    // 40 tokens need more than one binding of activations here: several submits.
    check_moe(&b, &layer, 40, 62, "split weights and tokens");
    if b.has_timestamps() {
        let (hs, logits) = synth_batch(40, 64, 8, 62);
        let (_, times) = b
            .moe_path(&g, &hs, &logits, MoeOptions::default(), MoePath::Gemm, true)
            .unwrap();
        let times = times.unwrap_or_default();
        let submits = times.iter().filter(|(n, _)| n == "route").count();
        assert_eq!(submits, 3, "40 tokens at 18 per binding: {times:?}");
    }
    // One expert larger than a binding: a clear OutOfMemory naming sizes.
    b.set_max_chunk_bytes(per_expert - 4);
    match b.prepare(&layer) {
        Err(BackendError::OutOfMemory(msg)) => assert!(msg.contains("MiB"), "{msg}"),
        other => panic!("expected OutOfMemory, got {:?}", other.map(|g| g.chunks())),
    }
    // Quant ops chunk too: 8 blocks per chunk.
    b.set_max_chunk_bytes(8 * 128);
    let x = special_inputs(MxFormat::Fp6E2M3, 3);
    let cpu = mxmoe::format::qdq_slice(MxFormat::Fp6E2M3, ScaleMode::RCeil, &x, 32).unwrap();
    let gpu = b
        .qdq(MxFormat::Fp6E2M3, ScaleMode::RCeil, &x[..32 * 100], 32)
        .unwrap();
    assert_bits("qdq chunked", &cpu[..32 * 100], &gpu, &x);
    let t = MxTensor::quantize(
        MxFormat::Fp4E2M1,
        ScaleMode::Even,
        &x[..32 * 100],
        &[100, 32],
    )
    .unwrap();
    let tg = b
        .quantize(
            MxFormat::Fp4E2M1,
            ScaleMode::Even,
            &x[..32 * 100],
            &[100, 32],
        )
        .unwrap();
    assert_eq!(t, tg, "quantize chunked");
    assert_bits(
        "dequantize chunked",
        &t.dequantize(),
        &b.dequantize(&t).unwrap(),
        &[],
    );
}

/// The shared conformance suite (`src/check`, what `mxmoe check --backend wgpu` runs): no FAIL;
/// UNSUPPORTED cases are printed.
#[test]
fn check_suite_quick_has_no_failures() {
    let b = gpu!("check_suite_quick_has_no_failures");
    let backend = mxmoe::backend::Backend::Wgpu(b.clone());
    let results = mxmoe::check::run_suite(&backend, mxmoe::check::Suite::Quick);
    let mut failed = Vec::new();
    for r in &results {
        if r.status != mxmoe::check::Status::Ok {
            eprintln!("{} {} {}", r.status, r.name, r.detail);
        }
        if r.status == mxmoe::check::Status::Fail {
            failed.push(format!("{}: {}", r.name, r.detail));
        }
    }
    let (ok, fail, unsup, skip) = mxmoe::check::summary(&results);
    eprintln!(
        "check quick on {}: {ok} OK, {fail} FAIL, {unsup} UNSUPPORTED, {skip} SKIPPED",
        b.adapter()
    );
    assert!(failed.is_empty(), "FAIL: {failed:#?}");
}

/// Timing hooks for benchmarks: a timed forward gives the same output and, with
/// TIMESTAMP_QUERY, one non-negative duration per pass.
#[test]
fn moe_timed_forward() {
    let b = gpu!("moe_timed_forward");
    let layer = synth_layer(&SynthSpec::new(Scheme::OCP_MX[0], 8, 64, 64, 2))
        .unwrap()
        .layer;
    let (hs, logits) = synth_batch(5, 64, 8, 3);
    let g = b.prepare(&layer).unwrap();
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
    };
    let plain = b
        .moe_path(&g, &hs, &logits, opts, MoePath::Gemv, false)
        .unwrap()
        .0;
    let (timed, times) = b
        .moe_path(&g, &hs, &logits, opts, MoePath::Gemv, true)
        .unwrap();
    let times = times.unwrap_or_default();
    assert_eq!(plain.output, timed.output);
    eprintln!("pass times (ms): {times:?}");
    if b.has_timestamps() {
        let names: Vec<&str> = times.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "route",
                "moe/lists",
                "moe/input_qdq",
                "moe/gemv1",
                "moe/gemv2",
                "moe/combine"
            ]
        );
        assert!(times.iter().all(|(_, t)| *t >= 0.0 && t.is_finite()));
    } else {
        println!("UNSUPPORTED timestamps on {}", b.adapter());
    }
}

/// Not a correctness test: GPU pass times for a few shapes on both paths (run with
/// `cargo test --release --test wgpu_backend -- --ignored --nocapture timing_report`;
/// `MXMOE_TIMING="128,2880,2880,4,1;128,2880,2880,4,256"` for model shapes).
#[test]
#[ignore]
fn timing_report() {
    let b = gpu!("timing_report");
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
    };
    // MXMOE_TIMING="E,H,I,k,M[;E,H,I,k,M...]" picks the shapes (e.g. gpt-oss-120b decode:
    // "128,2880,2880,4,1"); MXMOE_TIMING_M=M keeps the default layer with M tokens.
    let shapes: Vec<(usize, usize, usize, usize, usize)> =
        if let Ok(v) = std::env::var("MXMOE_TIMING") {
            v.split(';')
                .map(|t| {
                    let n: Vec<usize> = t.split(',').map(|x| x.trim().parse().unwrap()).collect();
                    (n[0], n[1], n[2], n[3], n[4])
                })
                .collect()
        } else if let Ok(v) = std::env::var("MXMOE_TIMING_M") {
            vec![(32, 1024, 512, 4, v.parse().unwrap())]
        } else {
            vec![
                (32, 1024, 512, 4, 1),
                (32, 1024, 512, 4, 16),
                (32, 1024, 512, 4, 256),
            ]
        };
    for (e, h, i, k, m) in shapes {
        let layer = mxmoe::moe::synth::synth_layer_packed(&spec(
            Scheme::OCP_MX[0],
            Activation::Silu,
            e,
            h,
            i,
            k,
        ))
        .unwrap();
        let g = b.prepare(&layer).unwrap();
        let (hs, logits) = synth_batch(m, h, e, 1);
        for path in [MoePath::Gemm, MoePath::Gemv] {
            let _ = b.moe_path(&g, &hs, &logits, opts, path, true).unwrap();
            let t = Instant::now();
            let (_, times) = b.moe_path(&g, &hs, &logits, opts, path, true).unwrap();
            let times = times.unwrap_or_default();
            let wall = t.elapsed().as_secs_f64() * 1e3;
            let gpu: f64 = times.iter().map(|(_, t)| t).sum();
            let flops = 2.0 * (m * k) as f64 * (3 * h * i) as f64;
            eprintln!(
                "E={e} H={h} I={i} k={k} M={m} {path:?}: wall {wall:.2} ms, GPU {gpu:.2} ms \
                 ({:.2} GFLOP/s, weights {:.1} MiB) {times:.3?}",
                flops / gpu.max(1e-9) / 1e6,
                g.bytes as f64 / (1 << 20) as f64
            );
        }
    }
}

/// Streaming-read bandwidth of weight-like and pooled buffers (GB/s per pass), e.g. on the
/// H200: `MXMOE_PROBE_MIB=1024 <test binary> --ignored --nocapture bandwidth_probe`.
#[test]
#[ignore]
fn bandwidth_probe() {
    let b = gpu!("bandwidth_probe");
    let mib: u64 = std::env::var("MXMOE_PROBE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let r = b.bandwidth_probe(mib << 20, 5).unwrap();
    eprintln!("bandwidth probe, {mib} MiB: {r:.1?}");
}

/// `mxmoe info`'s adapter list: non-empty when a backend opened, and it names the chosen one.
#[test]
fn adapters_are_listed() {
    let b = gpu!("adapters_are_listed");
    let list = WgpuBackend::enumerate_adapters();
    for a in &list {
        eprintln!("adapter: {a}");
    }
    let chosen = &b.info().adapter;
    assert!(
        list.iter()
            .any(|a| a.name == chosen.name && a.backend == chosen.backend),
        "{} not in the adapter list",
        chosen.name
    );
    assert!(chosen.compute);
    assert!(chosen.max_storage_buffer_binding_size >= 128 << 20);
    eprintln!("enabled features: {:?}", b.info().enabled_features);
}

/// Bad inputs give errors (the CPU's messages where it has them), never panics or garbage.
#[test]
fn bad_inputs_are_errors() {
    let b = gpu!("bad_inputs_are_errors");
    let layer = synth_layer(&SynthSpec::new(Scheme::OCP_MX[0], 4, 32, 32, 2))
        .unwrap()
        .layer;
    let (hs, logits) = synth_batch(3, 32, 4, 1);
    let o = MoeOptions::default();
    assert!(
        once(&b, &layer, &hs, &logits[..11], o).is_err(),
        "short logits"
    );
    assert!(
        once(&b, &layer, &hs[..40], &logits, o).is_err(),
        "ragged hidden"
    );
    let mut nan = logits.clone();
    nan[5] = f32::NAN;
    let e = once(&b, &layer, &hs, &nan, o).unwrap_err().to_string();
    assert!(e.contains("NaN"), "{e}");
    assert!(b
        .qdq(MxFormat::Fp4E2M1, ScaleMode::Even, &[0.0; 48], 48)
        .is_err());
    assert!(b
        .qdq(MxFormat::Fp4E2M1, ScaleMode::Even, &[0.0; 40], 32)
        .is_err());
    assert!(b
        .quantize(MxFormat::Fp4E2M1, ScaleMode::Even, &[0.0; 64], &[3, 32])
        .is_err());
    let mut t =
        MxTensor::quantize(MxFormat::Fp6E3M2, ScaleMode::Even, &[1.0; 64], &[2, 32]).unwrap();
    t.data.pop();
    assert!(b.dequantize(&t).is_err());
    let cfg = RouterConfig {
        top_k: 2,
        n_group: Some(64),
        topk_group: Some(2),
        ..RouterConfig::default()
    };
    assert!(matches!(
        b.route(&cfg, &vec![0.0; 128], 128, None),
        Err(BackendError::Unsupported { .. })
    ));
}
