//! Property tests (proptest) of the numerics contract and the reference MoE.
//!
//! * QDQ is value-idempotent for every format x mode, with the scale-byte behaviour each mode
//!   actually has (see `qdq_idempotent`);
//! * every QDQ output is the nearest representable value of `scale · grid` under the contract's
//!   tie rule (the brute-force oracle of `tests/oracle`);
//! * pack/unpack round-trips; `MxTensor` agrees with `quantize_block` / `dequantize_block` /
//!   `qdq_slice`;
//! * `forward` with f32 accumulation agrees with f64 accumulation within a stated bound, and
//!   `forward` (f64) agrees with `forward_naive`.
//!
//! The RNG seed is fixed, so a run is reproducible; case counts keep the file under a minute.

mod oracle;

use mxmoe::check::rel_l2;
use mxmoe::format::{
    dequantize_block, pack_codes, qdq_block, qdq_slice, quantize_block, unpack_codes, MxFormat,
    MxTensor, ScaleMode, BLOCK,
};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::moe::{forward, forward_naive, Accumulate, Activation, MoeOptions};
use mxmoe::scheme::Scheme;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x6d_786d_6f65),
        failure_persistence: None,
        ..Config::default()
    }
}

fn fmt_s() -> impl Strategy<Value = MxFormat> {
    prop::sample::select(MxFormat::ALL.to_vec())
}
fn mode_s() -> impl Strategy<Value = ScaleMode> {
    prop::sample::select(ScaleMode::ALL.to_vec())
}

/// One element: mostly `m · 2^e` with a block-wide exponent (so blocks have a realistic spread),
/// sometimes zero (either sign), an arbitrary finite f32, or an fp32 subnormal.
fn elem_s(e: i32) -> impl Strategy<Value = f32> {
    prop_oneof![
        5 => (-8.0f64..8.0).prop_map(move |m| (m * 2f64.powi(e)) as f32),
        // Multiples of 2^(e-4): exact ties for every grid (and exact grid values).
        3 => (-128i32..128).prop_map(move |n| (n as f64 * 2f64.powi(e - 4)) as f32),
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => any::<f32>().prop_filter("finite", |v| v.is_finite()),
        1 => (1u32..0x0080_0000, any::<bool>()).prop_map(|(b, neg)| {
            let v = f32::from_bits(b);
            if neg { -v } else { v }
        }),
    ]
}

/// A 32-element block around a random binade, occasionally holding NaN or ±Inf.
fn block_s() -> impl Strategy<Value = Vec<f32>> {
    (-140i32..125, 0u32..40, 0usize..BLOCK).prop_flat_map(|(e, special, pos)| {
        prop::collection::vec(elem_s(e), BLOCK).prop_map(move |mut v| {
            match special {
                0 => v[pos] = f32::NAN,
                1 => v[pos] = f32::INFINITY,
                2 => v[pos] = f32::NEG_INFINITY,
                _ => {}
            }
            v
        })
    })
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

proptest! {
    #![proptest_config(config(12000))]

    /// QDQ is idempotent **in values** for every format x mode: `qdq(qdq(x)) == qdq(x)` bit for
    /// bit (NaN blocks stay all-NaN). The scale byte is another matter:
    /// * Floor: unchanged — amax/2^s lies in [2^emax, 2^(emax+1)) and RNE is monotone with
    ///   2^emax on the grid, so the re-quantized amax keeps the same binade.
    /// * Even: unchanged for the float formats (a bumped amax rounds up to exactly 2^emax, an
    ///   unbumped one to at most max, below the bump threshold). MXINT8 has one exception: an
    ///   fp32-subnormal amax whose bit-formula carry gave 2^-126 re-quantizes to exactly 2^-127,
    ///   which the formula maps to 2^-127 (decision below); values are still equal.
    /// * Ceil and RCeil: the byte may drop by one — amax/2^s in (2^(emax−1), 2^emax] (Ceil) or
    ///   (max/2, max] (RCeil) can round down onto 2^(emax−1) or max/2. Values are preserved because
    ///   doubling a grid value of magnitude <= max/2 is exact. So we assert byte' ∈ {byte−1, byte}
    ///   and, when equal, identical codes.
    ///
    /// One more exception, a contract edge (reported): Even, Ceil and RCeil can pick a scale
    /// whose largest product `decode(code) · 2^s` is 2^128, beyond fp32, when amax >= 2^127
    /// (Even's carry into the Inf exponent gives s = 128 − emax, NUMERICS.md section 8). The
    /// dequantized value is then +-Inf (IEEE overflow) and a second QDQ gives a NaN block. We
    /// assert that this happens only there, and test idempotence on the blocks with a finite QDQ.
    #[test]
    fn qdq_idempotent(fmt in fmt_s(), mode in mode_s(), x in block_s()) {
        let mut y = [0f32; BLOCK];
        qdq_block(fmt, mode, &x, &mut y);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        if x.iter().all(|v| v.is_finite()) && y.iter().any(|v| !v.is_finite()) {
            prop_assert!(mode != ScaleMode::Floor && amax >= 2f32.powi(127),
                "{} {}: finite block (amax {:e}) gave a non-finite QDQ", fmt, mode, amax);
            return Ok(());
        }
        let mut z = [0f32; BLOCK];
        qdq_block(fmt, mode, &y, &mut z);
        prop_assert!(same_bits(&y, &z), "{} {}: qdq not idempotent\nx = {:?}\ny = {:?}\nz = {:?}", fmt, mode, x, y, z);

        let (mut c1, mut c2) = ([0u8; BLOCK], [0u8; BLOCK]);
        let b1 = quantize_block(fmt, mode, &x, &mut c1);
        let b2 = quantize_block(fmt, mode, &y, &mut c2);
        if b1 == 0xFF {
            prop_assert_eq!(b2, 0xFF);
            return Ok(());
        }
        let int8_subnormal = fmt == MxFormat::Int8 && b1 <= 1;
        match mode {
            ScaleMode::Floor => prop_assert_eq!(b2, b1, "{} floor", fmt),
            ScaleMode::Even if !int8_subnormal => prop_assert_eq!(b2, b1, "{} even", fmt),
            _ => prop_assert!(b2 == b1 || b2 + 1 == b1, "{} {}: byte {} -> {}", fmt, mode, b1, b2),
        }
        if b1 == b2 {
            prop_assert_eq!(c1, c2, "{} {}: codes changed at the same scale", fmt, mode);
        }
    }

    /// Every QDQ output is the nearest value of `2^s · grid` to its input (ties to the even code
    /// LSB, saturated, sign of zero kept), with `s` the oracle's scale for the block's amax.
    #[test]
    fn qdq_is_nearest(fmt in fmt_s(), mode in mode_s(), x in block_s()) {
        let p = oracle::params(fmt);
        let g = oracle::grid(&p);
        let mut y = [0f32; BLOCK];
        qdq_block(fmt, mode, &x, &mut y);
        if x.iter().any(|v| !v.is_finite()) {
            prop_assert!(y.iter().all(|v| v.is_nan()));
            return Ok(());
        }
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let byte = match oracle::scale_byte(&p, mode, amax) {
            Some(b) => b,
            None => {
                let mut c = [0u8; BLOCK];
                let b = quantize_block(fmt, mode, &x, &mut c);
                prop_assert!(b <= 1);
                b
            }
        };
        let s = byte as i32 - 127;
        for (j, (&xi, &yi)) in x.iter().zip(&y).enumerate() {
            let c = oracle::nearest_code(&p, &g, xi, s);
            let want = (oracle::decode(&p, c) * oracle::pow2(s)) as f32;
            prop_assert_eq!(yi.to_bits(), want.to_bits(),
                "{} {}: elem {} = {:e} -> {:e}, oracle {:e} (scale {})", fmt, mode, j, xi, yi, want, byte);
        }
    }

    /// unpack(pack(codes)) == codes for codes of the format's width, and pack(unpack(bytes)) ==
    /// bytes for arbitrary packed bytes (every bit pattern is a valid packing).
    #[test]
    fn pack_roundtrip(fmt in fmt_s(), blocks in 1usize..5, seed in any::<u64>()) {
        let mut gen = oracle::Gen::new(seed);
        let n = blocks * BLOCK;
        let mask = ((1u32 << fmt.spec().code_bits) - 1) as u8;
        let codes: Vec<u8> = (0..n).map(|_| gen.u64() as u8 & mask).collect();
        let mut packed = vec![0u8; fmt.packed_len(n)];
        pack_codes(fmt, &codes, &mut packed);
        let mut back = vec![0u8; n];
        unpack_codes(fmt, &packed, &mut back);
        prop_assert_eq!(&back, &codes);
        let bytes: Vec<u8> = (0..packed.len()).map(|_| gen.u64() as u8).collect();
        unpack_codes(fmt, &bytes, &mut back);
        prop_assert!(back.iter().all(|&c| c <= mask));
        pack_codes(fmt, &back, &mut packed);
        prop_assert_eq!(&packed, &bytes);
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// `MxTensor::quantize` equals `quantize_block` per block (scales, codes, packing through
    /// `codes()`), `dequantize` equals `dequantize_block`, `qdq_slice` equals quantize then
    /// dequantize, and `MxTensor::new` accepts its own parts.
    #[test]
    fn mxtensor_consistent(fmt in fmt_s(), mode in mode_s(), lead in 1usize..3, rows in 1usize..4,
                           kb in 1usize..4, blocks in prop::collection::vec(block_s(), 24)) {
        let k = kb * BLOCK;
        let n = lead * rows * k;
        let x: Vec<f32> = blocks.concat().into_iter().cycle().take(n).collect();
        let shape = vec![lead, rows, k];
        let t = MxTensor::quantize(fmt, mode, &x, &shape).unwrap();
        let codes = t.codes();
        let deq = t.dequantize();
        for (b, xb) in x.chunks_exact(BLOCK).enumerate() {
            let mut c = [0u8; BLOCK];
            let s = quantize_block(fmt, mode, xb, &mut c);
            prop_assert_eq!(t.scales[b], s, "block {}", b);
            prop_assert_eq!(&codes[b * BLOCK..(b + 1) * BLOCK], &c[..], "block {}", b);
            let mut out = [0f32; BLOCK];
            dequantize_block(fmt, &c, s, &mut out);
            prop_assert!(same_bits(&deq[b * BLOCK..(b + 1) * BLOCK], &out), "block {}", b);
        }
        let q = qdq_slice(fmt, mode, &x, k).unwrap();
        prop_assert!(same_bits(&q, &deq));
        let t2 = MxTensor::new(fmt, shape, t.data.clone(), t.scales.clone()).unwrap();
        prop_assert_eq!(t2, t);
    }
}

/// A random small MoE layer and batch.
fn moe_case() -> impl Strategy<Value = (SynthSpec, usize, u64)> {
    (
        prop::sample::select(Scheme::ALL.to_vec()),
        prop::sample::select(vec![Activation::Silu, Activation::SwigluOai]),
        2usize..7,
        1usize..4,
        1usize..4,
        1usize..3,
        any::<bool>(),
        any::<u64>(),
        1usize..7,
    )
        .prop_map(|(scheme, act, e, hb, ib, k, bias, seed, m)| {
            let mut spec = SynthSpec::new(scheme, e, hb * BLOCK, ib * BLOCK, k.min(e));
            spec.activation = act;
            spec.bias = bias;
            spec.seed = seed;
            (spec, m, seed)
        })
}

proptest! {
    #![proptest_config(config(96))]

    /// `forward` with f32 accumulation agrees with f64 accumulation: relative L2 <= 2e-5.
    ///
    /// Why 2e-5: the f32 path rounds each GEMM dot product (8 lanes of <= n/8 sequential terms,
    /// then a 3-level tree) with error <= gamma_(n/8+3) · (|W||x|)_r, where gamma_m ~ m · 2^-24;
    /// for n <= 96 that is <= 15 · 6e-8 ~ 9e-7 of (|W||x|)_r. For these random layers
    /// ‖|W||x|‖ / ‖Wx‖ is at most ~ sqrt(n) ~ 10, the activation's derivative is <= ~2, and two
    /// GEMMs plus O(1) fp32 epilogue roundings add up: ~ 2 · 9e-7 · 10 + small ~ 2e-5. Observed
    /// values are ~ 1e-7. The activation QDQ points see identical inputs (input QDQ) or inputs
    /// that differ in the last bits (intermediate QDQ); a code flip at a rounding boundary would
    /// show up as an error ~ 1e-2 for that token. It has probability ~ 1e-6 per element and does
    /// not occur for this fixed seed; if this test ever fails for a QDQ scheme, check for one.
    #[test]
    fn forward_f32_vs_f64((spec, m, seed) in moe_case()) {
        let layer = synth_layer(&spec).unwrap().layer;
        let (hs, lg) = synth_batch(m, spec.hidden, spec.n_experts, seed);
        let opts = |accumulate| MoeOptions { accumulate, ..Default::default() };
        let o64 = forward(&layer, &hs, &lg, opts(Accumulate::F64)).unwrap();
        let o32 = forward(&layer, &hs, &lg, opts(Accumulate::F32)).unwrap();
        prop_assert_eq!(&o32.routing, &o64.routing);
        prop_assert!(o64.output.iter().any(|v| *v != 0.0));
        let r = rel_l2(&o32.output, &o64.output).0;
        prop_assert!(r <= 2e-5, "{} {} H{} I{} E{} k{} m{}: rel L2 {:e}", spec.scheme,
            spec.activation, spec.hidden, spec.inter, spec.n_experts, spec.router.top_k, m, r);
    }

    /// `forward` (f64) agrees with `forward_naive` to within one fp32 ulp per element. Both
    /// accumulate in f64 (8 lanes + tree vs sequential), so before the final f32 rounding they
    /// differ by ~1e-15 relative; that can move a rounding by at most one f32 ulp (2^-23
    /// relative; a flip of the f32-rounded activation feeding the intermediate QDQ is ~1e-8
    /// likely per element). Observed: bitwise equal.
    #[test]
    fn forward_vs_naive((spec, m, seed) in moe_case()) {
        let layer = synth_layer(&spec).unwrap().layer;
        let (hs, lg) = synth_batch(m, spec.hidden, spec.n_experts, seed);
        let o = forward(&layer, &hs, &lg, MoeOptions::default()).unwrap();
        let n = forward_naive(&layer, &hs, &lg).unwrap();
        prop_assert_eq!(&o.routing, &n.routing);
        for (j, (a, b)) in o.output.iter().zip(&n.output).enumerate() {
            let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
            prop_assert!(ulps <= 1 || a == b, "{}: output[{}] {:e} vs naive {:e}", spec.scheme, j, a, b);
        }
        prop_assert!(rel_l2(&o.output, &n.output).0 <= 2f64.powi(-23));
    }
}
