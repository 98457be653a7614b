//! Loading what people have (issue 11): small model directories written here in each naming
//! convention (Hugging Face gpt-oss with an index and shards, original gpt-oss, vLLM names,
//! Quark per-expert, DeepSeek-V3/R1) and a small llama.cpp GGUF. Each one lists its layers,
//! loads the same weights the writer put in, extracts a layer as a bundle, and runs on the CPU
//! and wgpu backends from `hidden_states` alone (the model's router computes the logits).
//!
//! The writers below are this file's own code: they lay out a known layer's bytes the way each
//! convention documents it (reshapes, per-expert splits, gate/up de-interleaving, ggml's nibble
//! order), independently of the loader under test.
//!
//! Over 600 lines: one writer per convention (six, and GGUF) is most of it; each is short.

use mxmoe::format::{MxFormat, MxTensor, BLOCK};
use mxmoe::io::{self, Convention, LayerQuery, OutTensor, TokenBatch};
use mxmoe::moe::synth::{synth_layer_packed, SynthSpec};
use mxmoe::moe::{Activation, MoeLayer, MoeOptions, Scoring};
use mxmoe::scheme::Scheme;
use safetensors::tensor::Dtype;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const E: usize = 4;
const H: usize = 64;
const I: usize = 64;
const M: usize = 5;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mxmoe"))
}

fn run(args: &[&str]) -> (bool, String, String) {
    let o = bin().args(args).output().expect("spawn mxmoe");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn bf16(name: &str, shape: Vec<usize>, v: &[f32]) -> OutTensor {
    let bytes: Vec<u8> = v
        .iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect();
    OutTensor {
        name: name.into(),
        dtype: Dtype::BF16,
        shape,
        bytes: bytes.into(),
    }
}

/// A source layer (random codes, plausible scales) and its router weights `[E, H]` + bias,
/// all exactly representable in bf16 (so a bf16 checkpoint holds them exactly).
struct Source {
    layer: MoeLayer,
    router_w: Vec<f32>,
    router_b: Vec<f32>,
    corr: Vec<f32>,
}

fn bf16_exact(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

fn source(scheme: Scheme, e: usize, activation: Activation, bias: bool, seed: u64) -> Source {
    let mut spec = SynthSpec::new(scheme, e, H, I, 2);
    spec.activation = activation;
    spec.bias = bias;
    spec.seed = seed;
    let mut layer = synth_layer_packed(&spec).unwrap();
    for b in [&mut layer.weights.w13_bias, &mut layer.weights.w2_bias]
        .into_iter()
        .flatten()
    {
        b.iter_mut().for_each(|x| *x = bf16_exact(*x));
    }
    let r = |k: usize| bf16_exact((((k * 7919 + seed as usize * 31) % 211) as f32 - 105.0) / 512.0);
    Source {
        router_w: (0..e * H).map(r).collect(),
        router_b: (0..e).map(|k| r(k + 5000)).collect(),
        corr: (0..e).map(|k| (k % 3) as f32 * 0.125 - 0.125).collect(),
        layer,
    }
}

fn write_json(p: &Path, v: serde_json::Value) {
    std::fs::write(p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Two layers (0 and 1) of a source in `model.layers.N.mlp` names; `f` writes one layer's
/// expert tensors.
fn decoy(n: usize) -> OutTensor {
    bf16(
        &format!("model.layers.{n}.self_attn.q_proj.weight"),
        vec![2, 32],
        &[0.5; 64],
    )
}

/// Hugging Face gpt-oss: `gate_up_proj_blocks` `[E, 2I, H/32, 16]` (the packed bytes as they
/// are: gpt-oss packs low nibble first like OCP), `_scales`, `_bias`, router `mlp.router.*`;
/// two shards and `model.safetensors.index.json`.
fn write_hf_gptoss(dir: &Path, srcs: &[Source]) {
    let mut weight_map = serde_json::Map::new();
    for (n, src) in srcs.iter().enumerate() {
        let w = &src.layer.weights;
        let p = format!("model.layers.{n}.mlp.experts.");
        let t = vec![
            OutTensor::u8(
                format!("{p}gate_up_proj_blocks"),
                vec![E, 2 * I, H / 32, 16],
                &w.w13.data,
            ),
            OutTensor::u8(
                format!("{p}gate_up_proj_scales"),
                vec![E, 2 * I, H / 32],
                &w.w13.scales,
            ),
            bf16(
                &format!("{p}gate_up_proj_bias"),
                vec![E, 2 * I],
                w.w13_bias.as_ref().unwrap(),
            ),
            OutTensor::u8(
                format!("{p}down_proj_blocks"),
                vec![E, H, I / 32, 16],
                &w.w2.data,
            ),
            OutTensor::u8(
                format!("{p}down_proj_scales"),
                vec![E, H, I / 32],
                &w.w2.scales,
            ),
            bf16(
                &format!("{p}down_proj_bias"),
                vec![E, H],
                w.w2_bias.as_ref().unwrap(),
            ),
            bf16(
                &format!("model.layers.{n}.mlp.router.weight"),
                vec![E, H],
                &src.router_w,
            ),
            bf16(
                &format!("model.layers.{n}.mlp.router.bias"),
                vec![E],
                &src.router_b,
            ),
            decoy(n),
        ];
        let shard = format!("model-0000{}-of-00002.safetensors", n + 1);
        for x in &t {
            weight_map.insert(x.name.clone(), serde_json::json!(shard));
        }
        io::save(&dir.join(&shard), &t, HashMap::new()).unwrap();
    }
    write_json(
        &dir.join("model.safetensors.index.json"),
        serde_json::json!({"metadata": {}, "weight_map": weight_map}),
    );
    write_json(
        &dir.join("config.json"),
        serde_json::json!({"model_type": "gpt_oss", "num_local_experts": E,
            "num_experts_per_tok": 2, "quantization_config": {"quant_method": "mxfp4"}}),
    );
}

/// The original gpt-oss checkpoint: `block.N.mlp.mlp1_weight.blocks` ... and `mlp.gate.*`.
fn write_orig_gptoss(dir: &Path, srcs: &[Source]) {
    let mut t = Vec::new();
    for (n, src) in srcs.iter().enumerate() {
        let w = &src.layer.weights;
        let p = format!("block.{n}.mlp.");
        t.extend([
            OutTensor::u8(
                format!("{p}mlp1_weight.blocks"),
                vec![E, 2 * I, H / 32, 16],
                &w.w13.data,
            ),
            OutTensor::u8(
                format!("{p}mlp1_weight.scales"),
                vec![E, 2 * I, H / 32],
                &w.w13.scales,
            ),
            bf16(
                &format!("{p}mlp1_bias"),
                vec![E, 2 * I],
                w.w13_bias.as_ref().unwrap(),
            ),
            OutTensor::u8(
                format!("{p}mlp2_weight.blocks"),
                vec![E, H, I / 32, 16],
                &w.w2.data,
            ),
            OutTensor::u8(
                format!("{p}mlp2_weight.scales"),
                vec![E, H, I / 32],
                &w.w2.scales,
            ),
            bf16(
                &format!("{p}mlp2_bias"),
                vec![E, H],
                w.w2_bias.as_ref().unwrap(),
            ),
            bf16(&format!("{p}gate.weight"), vec![E, H], &src.router_w),
            bf16(&format!("{p}gate.bias"), vec![E], &src.router_b),
        ]);
    }
    io::save(&dir.join("model.safetensors"), &t, HashMap::new()).unwrap();
    write_json(
        &dir.join("config.json"),
        serde_json::json!({"num_experts": E, "experts_per_token": 2}),
    );
}

fn quark_config(w: &str, a: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "num_experts_per_tok": 2,
        "quantization_config": {"quant_method": "quark", "global_quant_config": {
            "weight": {"dtype": w, "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"},
            "input_tensors": {"dtype": a, "qscheme": "per_group", "group_size": 32}}}
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// vLLM parameter names: `model.layers.N.mlp.experts.w13_weight` `[E, 2I, packed(H)]` ...,
/// router `mlp.gate.weight`, the scheme in config.json (Quark).
fn write_vllm(dir: &Path, srcs: &[Source]) {
    let mut t = Vec::new();
    for (n, src) in srcs.iter().enumerate() {
        let w = &src.layer.weights;
        let p = format!("model.layers.{n}.mlp.experts.");
        t.extend([
            OutTensor::u8(format!("{p}w13_weight"), vec![E, 2 * I, H / 2], &w.w13.data),
            OutTensor::u8(
                format!("{p}w13_weight_scale"),
                vec![E, 2 * I, H / 32],
                &w.w13.scales,
            ),
            OutTensor::u8(format!("{p}w2_weight"), vec![E, H, I / 2], &w.w2.data),
            OutTensor::u8(
                format!("{p}w2_weight_scale"),
                vec![E, H, I / 32],
                &w.w2.scales,
            ),
            bf16(
                &format!("model.layers.{n}.mlp.gate.weight"),
                vec![E, H],
                &src.router_w,
            ),
            decoy(n),
        ]);
    }
    io::save(&dir.join("model.safetensors"), &t, HashMap::new()).unwrap();
    write_json(
        &dir.join("config.json"),
        quark_config("fp4", "fp4", serde_json::json!({})),
    );
}

/// Per-expert tensors `experts.E.{gate,up,down}_proj.weight` `[N, packed(K)]` + `weight_scale`:
/// gate = rows `[0, I)` of w13, up = rows `[I, 2I)`.
fn per_expert_tensors(p: &str, layer: &MoeLayer, fmt: MxFormat) -> Vec<OutTensor> {
    let w = &layer.weights;
    let e = layer.config.local_experts;
    let (h_, i_) = (layer.config.hidden, layer.config.inter);
    let (r13, r2) = (fmt.packed_len(h_), fmt.packed_len(i_));
    let mut t = Vec::new();
    for x in 0..e {
        let rows = |m: &MxTensor, rb: usize, sb: usize, r0: usize, n: usize, base: usize| {
            let d = m.data[(base + r0) * rb..(base + r0 + n) * rb].to_vec();
            let c = m.scales[(base + r0) * sb..(base + r0 + n) * sb].to_vec();
            (d, c)
        };
        let (g, gs) = rows(&w.w13, r13, h_ / 32, 0, i_, x * 2 * i_);
        let (u, us) = rows(&w.w13, r13, h_ / 32, i_, i_, x * 2 * i_);
        let (d, ds) = rows(&w.w2, r2, i_ / 32, 0, h_, x * h_);
        for (name, data, sc, n, rb, sb) in [
            ("gate_proj", g, gs, i_, r13, h_ / 32),
            ("up_proj", u, us, i_, r13, h_ / 32),
            ("down_proj", d, ds, h_, r2, i_ / 32),
        ] {
            t.push(OutTensor::u8(
                format!("{p}{x}.{name}.weight"),
                vec![n, rb],
                &data,
            ));
            t.push(OutTensor::u8(
                format!("{p}{x}.{name}.weight_scale"),
                vec![n, sb],
                &sc,
            ));
        }
    }
    t
}

/// Quark per-expert export, w_mxfp4_a_mxfp6_e3m2 (config.json), softmax router `mlp.gate`.
fn write_quark(dir: &Path, srcs: &[Source]) {
    let mut t = Vec::new();
    for (n, src) in srcs.iter().enumerate() {
        t.extend(per_expert_tensors(
            &format!("model.layers.{n}.mlp.experts."),
            &src.layer,
            MxFormat::Fp4E2M1,
        ));
        t.push(bf16(
            &format!("model.layers.{n}.mlp.gate.weight"),
            vec![E, H],
            &src.router_w,
        ));
        t.push(decoy(n));
    }
    io::save(&dir.join("model.safetensors"), &t, HashMap::new()).unwrap();
    write_json(
        &dir.join("config.json"),
        quark_config(
            "fp4",
            "fp6_e3m2",
            serde_json::json!({"model_type": "qwen3_moe", "norm_topk_prob": true}),
        ),
    );
}

/// DeepSeek-V3/R1: per-expert names, `mlp.gate.weight` + `mlp.gate.e_score_correction_bias`,
/// sigmoid group-limited routing from config.json. 8 experts in 2 groups.
fn write_deepseek(dir: &Path, srcs: &[Source]) {
    let mut t = Vec::new();
    for (n, src) in srcs.iter().enumerate() {
        let e = src.layer.config.local_experts;
        t.extend(per_expert_tensors(
            &format!("model.layers.{n}.mlp.experts."),
            &src.layer,
            MxFormat::Fp4E2M1,
        ));
        t.push(bf16(
            &format!("model.layers.{n}.mlp.gate.weight"),
            vec![e, H],
            &src.router_w,
        ));
        t.push(OutTensor::f32(
            format!("model.layers.{n}.mlp.gate.e_score_correction_bias"),
            vec![e],
            &src.corr,
        ));
    }
    io::save(&dir.join("model.safetensors"), &t, HashMap::new()).unwrap();
    write_json(
        &dir.join("config.json"),
        quark_config(
            "fp4",
            "fp4",
            serde_json::json!({"model_type": "deepseek_v3", "n_routed_experts": 8, "n_group": 2,
                "topk_group": 1, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
                "norm_topk_prob": true}),
        ),
    );
}

// ---- GGUF writer (ggml docs/gguf.md; MXFP4 = ggml type 39, block = e + qs[16], element j in
// ---- the low nibble of qs[j], element j + 16 in its high nibble: ggml-quants.c
// ---- dequantize_row_mxfp4).

fn gguf_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// One OCP-packed FP4 row (element 2j low nibble of byte j) + its scales as ggml MXFP4 blocks.
fn ggml_mxfp4_row(ocp: &[u8], scales: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (b, &sc) in ocp.chunks_exact(16).zip(scales) {
        let code = |q: usize| (b[q / 2] >> (4 * (q % 2))) & 0xF;
        out.push(sc);
        for j in 0..16 {
            out.push(code(j) | (code(j + 16) << 4));
        }
    }
    out
}

/// A gpt-oss GGUF: the interleaved w13 split back into gate (even rows) and up (odd rows).
fn write_gguf(path: &Path, srcs: &[Source]) {
    struct T {
        name: String,
        ne: Vec<u64>,
        ty: u32,
        data: Vec<u8>,
    }
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut ts: Vec<T> = Vec::new();
    for (n, src) in srcs.iter().enumerate() {
        let w = &src.layer.weights;
        let c = &src.layer.config;
        let (e_, h_, i_) = (c.local_experts, c.hidden, c.inter);
        let (rb13, sb13) = (h_ / 2, h_ / 32);
        let (rb2, sb2) = (i_ / 2, i_ / 32);
        let mut gate = Vec::new();
        let mut up = Vec::new();
        let mut down = Vec::new();
        for x in 0..e_ {
            for r in 0..2 * i_ {
                let row = x * 2 * i_ + r;
                let g = ggml_mxfp4_row(
                    &w.w13.data[row * rb13..(row + 1) * rb13],
                    &w.w13.scales[row * sb13..(row + 1) * sb13],
                );
                if r % 2 == 0 {
                    gate.extend(g)
                } else {
                    up.extend(g)
                }
            }
            for r in 0..h_ {
                let row = x * h_ + r;
                down.extend(ggml_mxfp4_row(
                    &w.w2.data[row * rb2..(row + 1) * rb2],
                    &w.w2.scales[row * sb2..(row + 1) * sb2],
                ));
            }
        }
        let b13 = w.w13_bias.as_ref().unwrap();
        let gb: Vec<f32> = (0..e_ * i_)
            .map(|k| b13[(k / i_) * 2 * i_ + 2 * (k % i_)])
            .collect();
        let ub: Vec<f32> = (0..e_ * i_)
            .map(|k| b13[(k / i_) * 2 * i_ + 2 * (k % i_) + 1])
            .collect();
        let (e, h, i) = (e_ as u64, h_ as u64, i_ as u64);
        let b = format!("blk.{n}");
        ts.extend([
            T {
                name: format!("{b}.ffn_gate_exps.weight"),
                ne: vec![h, i, e],
                ty: 39,
                data: gate,
            },
            T {
                name: format!("{b}.ffn_up_exps.weight"),
                ne: vec![h, i, e],
                ty: 39,
                data: up,
            },
            T {
                name: format!("{b}.ffn_down_exps.weight"),
                ne: vec![i, h, e],
                ty: 39,
                data: down,
            },
            T {
                name: format!("{b}.ffn_gate_exps.bias"),
                ne: vec![i, e],
                ty: 0,
                data: f32s(&gb),
            },
            T {
                name: format!("{b}.ffn_up_exps.bias"),
                ne: vec![i, e],
                ty: 0,
                data: f32s(&ub),
            },
            T {
                name: format!("{b}.ffn_down_exps.bias"),
                ne: vec![h, e],
                ty: 0,
                data: f32s(w.w2_bias.as_ref().unwrap()),
            },
            T {
                name: format!("{b}.ffn_gate_inp.weight"),
                ne: vec![h, e],
                ty: 0,
                data: f32s(&src.router_w),
            },
            T {
                name: format!("{b}.ffn_gate_inp.bias"),
                ne: vec![e],
                ty: 0,
                data: f32s(&src.router_b),
            },
        ]);
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((ts.len() as u64).to_le_bytes());
    out.extend(3u64.to_le_bytes()); // key/values
    gguf_str(&mut out, "general.architecture");
    out.extend(8u32.to_le_bytes());
    gguf_str(&mut out, "gpt-oss");
    gguf_str(&mut out, "gpt-oss.expert_used_count");
    out.extend(4u32.to_le_bytes());
    out.extend(2u32.to_le_bytes());
    gguf_str(&mut out, "tokenizer.ggml.tokens"); // an array of strings, skipped by the reader
    out.extend(9u32.to_le_bytes());
    out.extend(8u32.to_le_bytes());
    out.extend(2u64.to_le_bytes());
    gguf_str(&mut out, "<s>");
    gguf_str(&mut out, "hello");
    let mut off = 0u64;
    let mut offsets = Vec::new();
    for t in &ts {
        gguf_str(&mut out, &t.name);
        out.extend((t.ne.len() as u32).to_le_bytes());
        for d in &t.ne {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.ty.to_le_bytes());
        out.extend(off.to_le_bytes());
        offsets.push(off);
        off += (t.data.len() as u64).div_ceil(32) * 32;
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    let data_start = out.len();
    for (t, o) in ts.iter().zip(offsets) {
        out.resize(data_start + o as usize, 0);
        out.extend(&t.data);
    }
    std::fs::write(path, out).unwrap();
}

/// Independent router logits: f64 dot products + bias, rounded once (NUMERICS.md 10.7).
fn logits_by_hand(hidden: &[f32], w: &[f32], b: Option<&[f32]>, e: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for x in hidden.chunks(H) {
        for j in 0..e {
            let mut acc = 0f64;
            for k in 0..H {
                acc += w[j * H + k] as f64 * x[k] as f64;
            }
            acc += b.map_or(0.0, |b| b[j] as f64);
            out.push(acc as f32);
        }
    }
    out
}

fn hidden_states() -> Vec<f32> {
    (0..M * H)
        .map(|k| ((k * 37 % 101) as f32 - 50.0) / 16.0)
        .collect()
}

fn write_hidden_only(path: &Path) {
    io::save(
        path,
        &[OutTensor::f32(
            "hidden_states",
            vec![M, H],
            &hidden_states(),
        )],
        HashMap::new(),
    )
    .unwrap();
}

struct Case {
    conv: Convention,
    dir: PathBuf,
    srcs: Vec<Source>,
    scheme: Scheme,
    activation: Activation,
    scoring: Scoring,
    router_bias: bool,
}

fn cases(root: &Path) -> Vec<Case> {
    let fp4 = MxFormat::Fp4E2M1;
    let mk = |name: &str| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let w4 = Scheme::new(fp4, None);
    let gpt = |seed| {
        vec![
            source(w4, E, Activation::SwigluOai, true, seed),
            source(w4, E, Activation::SwigluOai, true, seed + 1),
        ]
    };
    let mut out = Vec::new();
    let d = mk("hf-gpt-oss");
    let srcs = gpt(10);
    write_hf_gptoss(&d, &srcs);
    out.push(Case {
        conv: Convention::HfGptOss,
        dir: d,
        srcs,
        scheme: w4,
        activation: Activation::SwigluOai,
        scoring: Scoring::TopkSoftmax,
        router_bias: true,
    });
    let d = mk("gpt-oss-original");
    let srcs = gpt(20);
    write_orig_gptoss(&d, &srcs);
    out.push(Case {
        conv: Convention::GptOssOriginal,
        dir: d,
        srcs,
        scheme: w4,
        activation: Activation::SwigluOai,
        scoring: Scoring::TopkSoftmax,
        router_bias: true,
    });
    let d = mk("gguf");
    let srcs = gpt(30);
    write_gguf(&d.join("gpt-oss-tiny-MXFP4.gguf"), &srcs);
    out.push(Case {
        conv: Convention::GgufGptOss,
        dir: d,
        srcs,
        scheme: w4,
        activation: Activation::SwigluOai,
        scoring: Scoring::TopkSoftmax,
        router_bias: true,
    });
    let s44 = Scheme::new(fp4, Some(fp4));
    let silu = |sc, e, seed| {
        vec![
            source(sc, e, Activation::Silu, false, seed),
            source(sc, e, Activation::Silu, false, seed + 1),
        ]
    };
    let d = mk("vllm");
    let srcs = silu(s44, E, 40);
    write_vllm(&d, &srcs);
    out.push(Case {
        conv: Convention::Vllm,
        dir: d,
        srcs,
        scheme: s44,
        activation: Activation::Silu,
        scoring: Scoring::Softmax,
        router_bias: false,
    });
    let s46 = Scheme::new(fp4, Some(MxFormat::Fp6E3M2));
    let d = mk("quark");
    let srcs = silu(s46, E, 50);
    write_quark(&d, &srcs);
    out.push(Case {
        conv: Convention::QuarkPerExpert,
        dir: d,
        srcs,
        scheme: s46,
        activation: Activation::Silu,
        scoring: Scoring::Softmax,
        router_bias: false,
    });
    let d = mk("deepseek");
    let srcs = silu(s44, 8, 60);
    write_deepseek(&d, &srcs);
    out.push(Case {
        conv: Convention::DeepSeek,
        dir: d,
        srcs,
        scheme: s44,
        activation: Activation::Silu,
        scoring: Scoring::Sigmoid,
        router_bias: false,
    });
    out
}

/// Every convention: listing, loading (the writer's bytes back), routing keys from config.json.
#[test]
fn each_convention_lists_and_loads_the_written_layers() {
    let d = tempfile::tempdir().unwrap();
    for c in cases(d.path()) {
        let tag = c.conv.name();
        let layers = io::list_layers(&c.dir, None).unwrap_or_else(|e| panic!("{tag}: {e}"));
        assert_eq!(layers.len(), 2, "{tag}");
        for (n, l) in layers.iter().enumerate() {
            assert_eq!(l.index, n, "{tag}");
            assert_eq!(l.convention, c.conv, "{tag}");
            assert_eq!(l.config.scheme, c.scheme, "{tag}");
            assert!(l.router, "{tag}: router weights found");
            let e = c.srcs[n].layer.config.local_experts;
            assert_eq!(
                (l.config.n_experts, l.config.hidden, l.config.inter),
                (e, H, I),
                "{tag}"
            );
            assert_eq!(l.config.router.top_k, 2, "{tag}");
            assert_eq!(l.bytes, c.srcs[n].layer.weight_bytes(), "{tag}");
        }
        let q = LayerQuery {
            index: Some(1),
            ..LayerQuery::default()
        };
        let got = io::load_layer_with(&c.dir, &q).unwrap_or_else(|e| panic!("{tag}: {e}"));
        let src = &c.srcs[1];
        let (gw, sw) = (&got.layer.weights, &src.layer.weights);
        assert_eq!(gw.w13, sw.w13, "{tag}: w13");
        assert_eq!(gw.w2, sw.w2, "{tag}: w2");
        assert_eq!(gw.w13_bias, sw.w13_bias, "{tag}: w13_bias");
        assert_eq!(gw.w2_bias, sw.w2_bias, "{tag}: w2_bias");
        let cfg = &got.layer.config;
        assert_eq!(cfg.activation, c.activation, "{tag}");
        assert_eq!(cfg.router.scoring, c.scoring, "{tag}");
        let r = got.router.as_ref().expect("router weights");
        assert_eq!(r.weight, src.router_w, "{tag}: router weight");
        assert_eq!(r.bias.is_some(), c.router_bias, "{tag}: router bias");
        if c.conv == Convention::DeepSeek {
            assert_eq!(gw.e_score_correction_bias.as_deref(), Some(&src.corr[..]));
            let rc = &cfg.router;
            assert_eq!(
                (
                    rc.n_group,
                    rc.topk_group,
                    rc.routed_scaling_factor,
                    rc.renormalize
                ),
                (Some(2), Some(1), 2.5, true)
            );
        }
        // Selection by name prefix gives the same layer; an ambiguous query lists the layers.
        let name = layers[1].name.clone();
        let by_name = io::load_layer_with(
            &c.dir,
            &LayerQuery {
                name: Some(name.clone()),
                ..LayerQuery::default()
            },
        )
        .unwrap();
        assert_eq!(by_name.layer.weights.w13, sw.w13, "{tag}: by name {name}");
        let err = io::load_layer(&c.dir).unwrap_err().to_string();
        assert!(
            err.contains("2 MoE layers match") && err.contains("--layer-index"),
            "{tag}: {err}"
        );
    }
}

/// The GGUF nibble order on one hand-written block: qs[j] = j | (15 - j) << 4 decodes to
/// element j = E2M1 code j and element j + 16 = code 15 - j (ggml), scale byte 128 = 2.
#[test]
fn gguf_nibble_order_by_hand() {
    // E2M1 code -> value (OCP MX spec table), written out.
    const FP4: [f32; 16] = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let d = tempfile::tempdir().unwrap();
    let mut block = vec![128u8];
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    // One expert, I = 32, H = 32: every row is this block.
    let rows = |n: usize| block.repeat(n);
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(3u64.to_le_bytes());
    out.extend(1u64.to_le_bytes());
    gguf_str(&mut out, "general.architecture");
    out.extend(8u32.to_le_bytes());
    gguf_str(&mut out, "gpt-oss");
    let names = [
        "blk.0.ffn_gate_exps.weight",
        "blk.0.ffn_up_exps.weight",
        "blk.0.ffn_down_exps.weight",
    ];
    for (k, n) in names.iter().enumerate() {
        gguf_str(&mut out, n);
        out.extend(3u32.to_le_bytes());
        for dim in [32u64, 32, 1] {
            out.extend(dim.to_le_bytes());
        }
        out.extend(39u32.to_le_bytes());
        out.extend(((k * 32 * 17).div_ceil(32) as u64 * 32).to_le_bytes());
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    let start = out.len();
    for k in 0..3usize {
        out.resize(start + (k * 32 * 17).div_ceil(32) * 32, 0);
        out.extend(rows(32));
    }
    let p = d.path().join("one.gguf");
    std::fs::write(&p, out).unwrap();
    let l = io::load_layer(&p).unwrap().layer;
    let mut v = vec![0f32; 32];
    l.weights.w2.dequantize_rows(0, &mut v);
    for j in 0..16 {
        assert_eq!(v[j], FP4[j] * 2.0, "element {j}");
        assert_eq!(v[j + 16], FP4[15 - j] * 2.0, "element {}", j + 16);
    }
}

fn cpu_reference(c: &Case, n: usize) -> mxmoe::moe::MoeOutput {
    let src = &c.srcs[n];
    let got = io::load_layer_with(
        &c.dir,
        &LayerQuery {
            index: Some(n),
            ..LayerQuery::default()
        },
    )
    .unwrap();
    // The source layer under the configuration the checkpoint states (checked above).
    let layer = MoeLayer {
        config: got.layer.config.clone(),
        weights: {
            let mut w = src.layer.weights.clone();
            if c.conv == Convention::DeepSeek {
                w.e_score_correction_bias = Some(src.corr.clone());
            }
            w
        },
    };
    let b = c.router_bias.then_some(&src.router_b[..]);
    let logits = logits_by_hand(&hidden_states(), &src.router_w, b, layer.config.n_experts);
    mxmoe::moe::forward(&layer, &hidden_states(), &logits, MoeOptions::default()).unwrap()
}

fn read_output(p: &Path) -> io::MoeResult {
    io::load_result(p).unwrap()
}

/// Through the CLI, per convention: `layers` lists, `moe` runs layer 1 from hidden_states only
/// on the CPU (bit-exact against the source layer with logits computed by hand) and on wgpu
/// (within the conformance bound, same experts), `extract` writes a bundle that runs the same.
#[test]
fn each_convention_through_the_cli_on_both_backends() {
    let d = tempfile::tempdir().unwrap();
    let batch = d.path().join("hidden.safetensors");
    write_hidden_only(&batch);
    let gpu = mxmoe::backend::Backend::open(mxmoe::backend::BackendKind::Wgpu, None).is_ok();
    if !gpu {
        assert!(
            std::env::var("MXMOE_REQUIRE_GPU").as_deref() != Ok("1"),
            "no GPU adapter but MXMOE_REQUIRE_GPU=1"
        );
        eprintln!("SKIPPED (wgpu part): no GPU adapter");
    }
    for c in cases(d.path()) {
        let tag = c.conv.name();
        let (ok, out, err) = run(&["layers", s(&c.dir)]);
        assert!(ok, "{tag}: {err}");
        assert!(
            out.contains(tag) && out.contains(&c.scheme.name()),
            "{tag}: {out}"
        );
        let want = cpu_reference(&c, 1);
        let mut outs = Vec::new();
        for be in ["cpu", "wgpu"].into_iter().filter(|b| *b == "cpu" || gpu) {
            let o = d.path().join(format!("{tag}-{be}.safetensors"));
            let (ok, _, err) = run(&[
                "moe",
                "--layer",
                s(&c.dir),
                "--layer-index",
                "1",
                "--input",
                s(&batch),
                "--output",
                s(&o),
                "--backend",
                be,
            ]);
            assert!(ok, "{tag} {be}: {err}");
            outs.push((be, read_output(&o)));
        }
        let cpu = &outs[0].1;
        assert_eq!(
            cpu.output, want.output,
            "{tag}: CPU output vs the source layer"
        );
        assert_eq!(cpu.routing.topk_ids, want.routing.topk_ids, "{tag}: ids");
        if let Some((_, g)) = outs.get(1) {
            assert_eq!(g.routing.topk_ids, cpu.routing.topk_ids, "{tag}: wgpu ids");
            let num: f64 = g
                .output
                .iter()
                .zip(&cpu.output)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum();
            let den: f64 = cpu.output.iter().map(|b| (*b as f64).powi(2)).sum();
            let rel = (num / den.max(1e-30)).sqrt();
            assert!(
                rel <= mxmoe::check::MOE_REL_L2,
                "{tag}: wgpu rel-L2 {rel:e}"
            );
        }
        // extract -> bundle (with router weights) -> same CPU result.
        let bundle = d.path().join(format!("{tag}-layer1.safetensors"));
        let (ok, _, err) = run(&[
            "extract",
            "--layer",
            s(&c.dir),
            "--layer-name",
            &io::list_layers(&c.dir, None).unwrap()[1].name.clone(),
            "--output",
            s(&bundle),
        ]);
        assert!(ok, "{tag} extract: {err}");
        let o = d.path().join(format!("{tag}-bundle.safetensors"));
        let (ok, _, err) = run(&[
            "moe",
            "--layer",
            s(&bundle),
            "--input",
            s(&batch),
            "--output",
            s(&o),
        ]);
        assert!(ok, "{tag} bundle: {err}");
        assert_eq!(
            read_output(&o).output,
            cpu.output,
            "{tag}: extracted bundle"
        );
    }
}

/// Bad inputs: an unknown layout lists names and conventions; a FP6-or-what layout without a
/// recorded scheme asks for --scheme; extract refuses to overwrite an input; a batch without
/// router_logits for a layer without router weights says what is missing.
#[test]
fn loading_errors_are_clear() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("weird.safetensors");
    io::save(
        &f,
        &[OutTensor::f32("foo.bar", vec![2], &[1.0, 2.0])],
        HashMap::new(),
    )
    .unwrap();
    let e = io::list_layers(&f, None).unwrap_err().to_string();
    assert!(
        e.contains("foo.bar")
            && e.contains("hf-gpt-oss")
            && e.contains("quark-per-expert")
            && e.contains("gguf"),
        "{e}"
    );

    // vLLM names, 3 bytes per 4 elements (FP6), no config: which FP6?
    let fp6 = d.path().join("fp6");
    std::fs::create_dir_all(&fp6).unwrap();
    let src = source(
        Scheme::new(MxFormat::Fp6E3M2, Some(MxFormat::Fp6E3M2)),
        E,
        Activation::Silu,
        false,
        7,
    );
    let w = &src.layer.weights;
    let p = "model.layers.0.mlp.experts.";
    io::save(
        &fp6.join("model.safetensors"),
        &[
            OutTensor::u8(
                format!("{p}w13_weight"),
                vec![E, 2 * I, H * 3 / 4],
                &w.w13.data,
            ),
            OutTensor::u8(
                format!("{p}w13_weight_scale"),
                vec![E, 2 * I, H / 32],
                &w.w13.scales,
            ),
            OutTensor::u8(format!("{p}w2_weight"), vec![E, H, I * 3 / 4], &w.w2.data),
            OutTensor::u8(
                format!("{p}w2_weight_scale"),
                vec![E, H, I / 32],
                &w.w2.scales,
            ),
        ],
        HashMap::new(),
    )
    .unwrap();
    let e = io::list_layers(&fp6, None).unwrap_err().to_string();
    assert!(
        e.contains("FP6") && e.contains("--scheme") && e.contains("w13_weight"),
        "{e}"
    );
    let s6 = Scheme::new(MxFormat::Fp6E3M2, Some(MxFormat::Fp6E3M2));
    let got = io::load_layer_with(
        &fp6,
        &LayerQuery {
            scheme: Some(s6),
            ..LayerQuery::default()
        },
    )
    .unwrap();
    assert_eq!(got.layer.weights.w13, w.w13);
    let (ok, out, err) = run(&["layers", s(&fp6), "--scheme", "w_mxfp6_e3m2_a_mxfp6_e3m2"]);
    assert!(ok && out.contains("vllm"), "{err}");

    // extract onto an input file
    let shard = fp6.join("model.safetensors");
    let before = std::fs::read(&shard).unwrap();
    let (ok, _, err) = run(&[
        "extract",
        "--layer",
        s(&fp6),
        "--scheme",
        "w_mxfp6_e3m2_a_mxfp6_e3m2",
        "--output",
        s(&shard),
    ]);
    assert!(!ok && err.contains("refusing"), "{err}");
    assert_eq!(
        std::fs::read(&shard).unwrap(),
        before,
        "the input is untouched"
    );

    // A batch with hidden_states only, for a layer without router weights.
    let batch = d.path().join("h.safetensors");
    write_hidden_only(&batch);
    let e = io::load_batch_for(&batch, None).unwrap_err().to_string();
    assert!(
        e.contains("router_logits") && e.contains("router weights"),
        "{e}"
    );
    // Batches with router_logits still work, and win over the router.
    let logits: Vec<f32> = (0..M * E).map(|k| k as f32).collect();
    io::save_batch(
        &batch,
        &TokenBatch {
            hidden: hidden_states(),
            logits: logits.clone(),
            m: M,
            hidden_size: H,
            n_experts: E,
        },
    )
    .unwrap();
    assert_eq!(io::load_batch_for(&batch, None).unwrap().logits, logits);
}

/// Zero-copy: a loaded bundle's packed weights are borrowed from the file mapping.
#[test]
fn bundles_load_zero_copy() {
    let d = tempfile::tempdir().unwrap();
    let src = source(
        Scheme::new(MxFormat::Fp4E2M1, None),
        E,
        Activation::Silu,
        false,
        3,
    );
    let p = d.path().join("l.safetensors");
    io::save_layer(&p, &src.layer, None).unwrap();
    let l = io::load_layer(&p).unwrap().layer;
    assert!(l.weights.w13.data.is_mapped() && l.weights.w2.scales.is_mapped());
    assert_eq!(l.weights.w13, src.layer.weights.w13);
    let _ = BLOCK;
}

/// quantize / dequantize / qdq on tensors of any rank and on checkpoints: a 3-D expert stack
/// quantizes to the bytes of the same values as rows; a checkpoint's experts dequantize to the
/// E2M1 table times the block scale.
#[test]
fn quantize_tools_take_any_rank_and_checkpoints() {
    let d = tempfile::tempdir().unwrap();
    let x: Vec<f32> = (0..2 * 3 * 64)
        .map(|k| ((k * 13 % 97) as f32 - 48.0) / 8.0)
        .collect();
    let f3 = d.path().join("x3.safetensors");
    let f2 = d.path().join("x2.safetensors");
    io::save(
        &f3,
        &[OutTensor::f32("w", vec![2, 3, 64], &x)],
        HashMap::new(),
    )
    .unwrap();
    io::save(&f2, &[OutTensor::f32("w", vec![6, 64], &x)], HashMap::new()).unwrap();
    let (q3, q2) = (
        d.path().join("q3.safetensors"),
        d.path().join("q2.safetensors"),
    );
    for (i, o) in [(&f3, &q3), (&f2, &q2)] {
        let (ok, _, err) = run(&[
            "quantize",
            "--format",
            "mxfp4",
            "--input",
            s(i),
            "--output",
            s(o),
        ]);
        assert!(ok, "{err}");
    }
    let a = io::StFile::open(&q3).unwrap();
    let b = io::StFile::open(&q2).unwrap();
    assert_eq!(a.shape("w").unwrap(), vec![2, 3, 32]);
    assert_eq!(a.shape("w_scale").unwrap(), vec![2, 3, 2]);
    assert_eq!(a.bytes_u8("w").unwrap().0, b.bytes_u8("w").unwrap().0);
    assert_eq!(
        a.bytes_u8("w_scale").unwrap().0,
        b.bytes_u8("w_scale").unwrap().0
    );
    // --tensor picks; a missing name is an error naming it.
    let (ok, _, err) = run(&[
        "qdq",
        "--format",
        "mxfp4",
        "--input",
        s(&f3),
        "--output",
        s(&d.path().join("n.safetensors")),
        "--tensor",
        "nope",
    ]);
    assert!(!ok && err.contains("nope"), "{err}");

    // A checkpoint: the HF gpt-oss directory, layer 1.
    let c = cases(d.path())
        .into_iter()
        .find(|c| c.conv == Convention::HfGptOss)
        .unwrap();
    let deq = d.path().join("deq.safetensors");
    let (ok, _, err) = run(&[
        "dequantize",
        "--input",
        s(&c.dir),
        "--layer-index",
        "1",
        "--output",
        s(&deq),
    ]);
    assert!(ok, "{err}");
    let f = io::StFile::open(&deq).unwrap();
    let (v, shape) = f.floats("w13_weight").unwrap();
    assert_eq!(shape, vec![E, 2 * I, H]);
    const FP4: [f32; 16] = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let w = &c.srcs[1].layer.weights.w13;
    for idx in [0usize, 1, 33, 777, v.len() - 1] {
        let byte = w.data[idx / 2];
        let code = if idx % 2 == 0 { byte & 15 } else { byte >> 4 };
        let scale = 2f32.powi(w.scales[idx / 32] as i32 - 127);
        assert_eq!(v[idx], FP4[code as usize] * scale, "element {idx}");
    }
    // quantize takes the checkpoint's experts as w13_weight / w2_weight [E, N, K].
    let q = d.path().join("requant.safetensors");
    let (ok, _, err) = run(&[
        "quantize",
        "--format",
        "mxfp4",
        "--input",
        s(&c.dir),
        "--layer-index",
        "0",
        "--output",
        s(&q),
    ]);
    assert!(ok, "{err}");
    let f = io::StFile::open(&q).unwrap();
    assert_eq!(f.shape("w13_weight").unwrap(), vec![E, 2 * I, H / 2]);
    assert_eq!(f.shape("w2_weight_scale").unwrap(), vec![E, H, I / 32]);
}

/// A GGUF cut short at every length, or with any header byte changed, is an error or a layer,
/// never a panic; the errors name the file.
#[test]
fn damaged_gguf_never_panics() {
    let d = tempfile::tempdir().unwrap();
    let src = vec![source(
        Scheme::new(MxFormat::Fp4E2M1, None),
        E,
        Activation::SwigluOai,
        true,
        90,
    )];
    let good = d.path().join("good.gguf");
    write_gguf(&good, &src);
    let bytes = std::fs::read(&good).unwrap();
    let p = d.path().join("bad.gguf");
    let try_load = |b: &[u8]| {
        std::fs::write(&p, b).unwrap();
        match std::panic::catch_unwind(|| io::load_layer(&p)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => assert!(e.to_string().contains("bad.gguf"), "{e}"),
            Err(_) => panic!("panic on a damaged GGUF ({} bytes)", b.len()),
        }
    };
    let header_end = bytes.len() - 4 * E * (2 * I * H + H * I) * 17 / 32 / 4; // roughly past the infos
    for n in (0..header_end.min(bytes.len()))
        .step_by(7)
        .chain([bytes.len() - 1])
    {
        try_load(&bytes[..n]);
    }
    for k in 0..header_end.min(bytes.len()).min(1200) {
        let mut b = bytes.clone();
        b[k] ^= 0xA5;
        try_load(&b);
    }
}

/// Model directories: an index naming a missing shard, a tensor in two shards, an empty
/// directory, and selection by a prefix that matches several layers (`model.layers.1` is
/// layer 1, not also 10..19).
#[test]
fn model_directory_errors_and_selection() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("m");
    std::fs::create_dir_all(&dir).unwrap();
    let e = io::list_layers(&dir, None).unwrap_err().to_string();
    assert!(e.contains("no model.safetensors.index.json"), "{e}");
    // 12 layers, one file: layer 1 by index and by the name prefix `model.layers.1`.
    let srcs: Vec<Source> = (0..12)
        .map(|k| {
            source(
                Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp4E2M1)),
                E,
                Activation::Silu,
                false,
                100 + k,
            )
        })
        .collect();
    write_vllm(&dir, &srcs);
    let layers = io::list_layers(&dir, None).unwrap();
    assert_eq!(
        layers.iter().map(|l| l.index).collect::<Vec<_>>(),
        (0..12).collect::<Vec<_>>()
    );
    for q in [
        LayerQuery {
            index: Some(10),
            ..LayerQuery::default()
        },
        LayerQuery {
            name: Some("model.layers.10".into()),
            ..LayerQuery::default()
        },
        LayerQuery {
            name: Some("model.layers.10.mlp".into()),
            ..LayerQuery::default()
        },
    ] {
        let l = io::load_layer_with(&dir, &q).unwrap();
        assert_eq!(l.layer.weights.w13, srcs[10].layer.weights.w13, "{q:?}");
    }
    let l = io::load_layer_with(
        &dir,
        &LayerQuery {
            name: Some("model.layers.1".into()),
            ..LayerQuery::default()
        },
    )
    .unwrap();
    assert_eq!(l.layer.weights.w13, srcs[1].layer.weights.w13);
    let e = io::load_layer_with(
        &dir,
        &LayerQuery {
            index: Some(12),
            ..LayerQuery::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("no MoE layer with index 12") && e.contains("11 (model.layers.11.mlp)"),
        "{e}"
    );
    // An index naming a shard that is not there.
    write_json(
        &dir.join("model.safetensors.index.json"),
        serde_json::json!({"weight_map": {"a": "model.safetensors", "b": "model-2.safetensors"}}),
    );
    let e = io::list_layers(&dir, None).unwrap_err().to_string();
    assert!(
        e.contains("model-2.safetensors") && e.contains("missing"),
        "{e}"
    );
    // The same tensor in two shards.
    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    io::save(
        &dir.join("model-2.safetensors"),
        &[decoy(0)],
        HashMap::new(),
    )
    .unwrap();
    let e = io::list_layers(&dir, None).unwrap_err().to_string();
    assert!(e.contains("in two shards") && e.contains("q_proj"), "{e}");
}

/// Not a test: writes the big fixtures docs/loading.md measures, from layers `mxmoe gen` made in
/// `$MXMOE_BIG_DIR`: `ds.safetensors` (DeepSeek-R1 shape) as a Quark per-expert directory
/// `ds-per-expert/`, and `gptoss.safetensors` (gpt-oss-120b shape, with biases) as
/// `gptoss.gguf`. Run with `MXMOE_BIG_DIR=... cargo test --release --test models -- --ignored`.
#[test]
#[ignore]
fn make_big_fixtures() {
    let Ok(dir) = std::env::var("MXMOE_BIG_DIR") else {
        eprintln!("MXMOE_BIG_DIR not set: nothing to write");
        return;
    };
    let dir = PathBuf::from(dir);
    let ds = dir.join("ds.safetensors");
    if ds.exists() {
        let l = io::load_layer(&ds).unwrap().layer;
        let out = dir.join("ds-per-expert");
        std::fs::create_dir_all(&out).unwrap();
        let t = per_expert_tensors("model.layers.3.mlp.experts.", &l, MxFormat::Fp4E2M1);
        io::save(&out.join("model.safetensors"), &t, HashMap::new()).unwrap();
        write_json(
            &out.join("config.json"),
            quark_config("fp4", "fp4", serde_json::json!({"num_experts_per_tok": 8})),
        );
    }
    let g = dir.join("gptoss.safetensors");
    if g.exists() {
        let l = io::load_layer(&g).unwrap().layer;
        let (e, h) = (l.config.local_experts, l.config.hidden);
        let src = Source {
            router_w: vec![0.0; e * h],
            router_b: vec![0.0; e],
            corr: Vec::new(),
            layer: l,
        };
        write_gguf(&dir.join("gptoss.gguf"), &[src]);
    }
}
