//! safetensors I/O: gpt-oss checkpoints load into the same layer type, bf16/f16 inputs widen
//! exactly, bundles round-trip, and malformed files give errors naming file and tensor.

use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::io::{self, OutTensor, StFile};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::moe::{self, Activation, Scoring};
use mxmoe::scheme::Scheme;
use safetensors::Dtype;
use std::collections::HashMap;

fn bf16_tensor(name: &str, shape: Vec<usize>, v: &[f32]) -> OutTensor {
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

/// A gpt-oss MXFP4 layer written with Hugging Face names (`*_blocks` [E, N, K/32, 16],
/// `*_scales` [E, N, K/32], bf16 `*_bias`) loads as swigluoai + top-k-then-softmax + weight-only
/// MXFP4, with the very bytes of the blocks as packed data (low nibble first).
#[test]
fn gpt_oss_checkpoint_loads_as_the_same_layer() {
    let (e, h, i) = (4, 64, 32);
    let mut spec = SynthSpec::new(Scheme::new(MxFormat::Fp4E2M1, None), e, h, i, 2);
    spec.activation = Activation::SwigluOai;
    spec.bias = true;
    let mut l = synth_layer(&spec).unwrap().layer;
    // bf16 biases, as gpt-oss stores them: round ours so the comparison is exact.
    for b in [&mut l.weights.w13_bias, &mut l.weights.w2_bias]
        .into_iter()
        .flatten()
    {
        b.iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
    }
    let d = tempfile::tempdir().unwrap();
    for hf in [true, false] {
        let pre = if hf {
            "model.layers.0.mlp.experts."
        } else {
            "block.0.mlp."
        };
        let n = |hfn: &str, ogn: &str| format!("{pre}{}", if hf { hfn } else { ogn });
        let ts = vec![
            OutTensor::u8(
                n("gate_up_proj_blocks", "mlp1_weight.blocks"),
                vec![e, 2 * i, h / 32, 16],
                &l.weights.w13.data,
            ),
            OutTensor::u8(
                n("gate_up_proj_scales", "mlp1_weight.scales"),
                vec![e, 2 * i, h / 32],
                &l.weights.w13.scales,
            ),
            bf16_tensor(
                &n("gate_up_proj_bias", "mlp1_bias"),
                vec![e, 2 * i],
                l.weights.w13_bias.as_ref().unwrap(),
            ),
            OutTensor::u8(
                n("down_proj_blocks", "mlp2_weight.blocks"),
                vec![e, h, i / 32, 16],
                &l.weights.w2.data,
            ),
            OutTensor::u8(
                n("down_proj_scales", "mlp2_weight.scales"),
                vec![e, h, i / 32],
                &l.weights.w2.scales,
            ),
            bf16_tensor(
                &n("down_proj_bias", "mlp2_bias"),
                vec![e, h],
                l.weights.w2_bias.as_ref().unwrap(),
            ),
        ];
        let path = d.path().join(format!("gptoss-{hf}.safetensors"));
        io::save(&path, &ts, HashMap::new()).unwrap();
        let got = io::load_layer(&path).unwrap().layer;
        assert_eq!(got.config.scheme.name(), "w_mxfp4");
        assert_eq!(got.config.activation, Activation::SwigluOai);
        assert_eq!(got.config.router.scoring, Scoring::TopkSoftmax);
        assert_eq!(got.config.router.top_k, 4);
        assert_eq!(
            (got.config.hidden, got.config.inter, got.config.n_experts),
            (h, i, e)
        );
        assert_eq!(got.weights.w13.data, l.weights.w13.data);
        assert_eq!(got.weights.w2.scales, l.weights.w2.scales);
        assert_eq!(got.weights.w13_bias, l.weights.w13_bias);
        // Same forward as the bundle layer with the same router.
        let mut want_l = l.clone();
        want_l.config.router = got.config.router.clone();
        let (hs, lg) = synth_batch(3, h, e, 5);
        let a = moe::forward(&got, &hs, &lg, Default::default()).unwrap();
        let b = moe::forward(&want_l, &hs, &lg, Default::default()).unwrap();
        assert_eq!(a.output, b.output);
    }
    // Two layers in one file: a clear error listing them.
    let mut ts = Vec::new();
    for li in 0..2 {
        let pre = format!("model.layers.{li}.mlp.experts.");
        ts.push(OutTensor::u8(
            format!("{pre}gate_up_proj_blocks"),
            vec![e, 2 * i, h / 32, 16],
            &l.weights.w13.data,
        ));
        ts.push(OutTensor::u8(
            format!("{pre}gate_up_proj_scales"),
            vec![e, 2 * i, h / 32],
            &l.weights.w13.scales,
        ));
    }
    let path = d.path().join("two.safetensors");
    io::save(&path, &ts, HashMap::new()).unwrap();
    let err = io::load_layer(&path).unwrap_err().to_string();
    assert!(
        err.contains("2 MoE layers match") && err.contains("model.layers.1"),
        "{err}"
    );
    // Scales whose shape does not match the blocks.
    let ts = vec![
        OutTensor::u8(
            "gate_up_proj_blocks",
            vec![e, 2 * i, h / 32, 16],
            &l.weights.w13.data,
        ),
        OutTensor::u8(
            "gate_up_proj_scales",
            vec![e, 2 * i, 1],
            &l.weights.w13.scales[..e * 2 * i],
        ),
    ];
    let path = d.path().join("bad.safetensors");
    io::save(&path, &ts, HashMap::new()).unwrap();
    let err = io::load_layer(&path).unwrap_err().to_string();
    assert!(
        err.contains("gate_up_proj_scales") && err.contains("blocks.shape[:-1]"),
        "{err}"
    );
}

/// bf16 and f16 hidden states widen exactly to f32.
#[test]
fn token_batches_accept_bf16_and_f16() {
    let d = tempfile::tempdir().unwrap();
    let vals = [1.0f32, -2.5, 0.15625, 65504.0, -0.0, 3.0e-5];
    let mut hs = vals.to_vec();
    hs.resize(32, 0.5);
    for dt in [Dtype::BF16, Dtype::F16] {
        let bytes: Vec<u8> = hs
            .iter()
            .flat_map(|x| match dt {
                Dtype::BF16 => half::bf16::from_f32(*x).to_le_bytes(),
                _ => half::f16::from_f32(*x).to_le_bytes(),
            })
            .collect();
        let t = OutTensor {
            name: "hidden_states".into(),
            dtype: dt,
            shape: vec![1, 32],
            bytes: bytes.into(),
        };
        let path = d.path().join(format!("b-{dt:?}.safetensors"));
        io::save(
            &path,
            &[
                t,
                OutTensor::f32("router_logits", vec![1, 3], &[0.0, 1.0, 2.0]),
            ],
            HashMap::new(),
        )
        .unwrap();
        let b = io::load_batch(&path).unwrap();
        for (g, x) in b.hidden.iter().zip(&hs) {
            let want = match dt {
                Dtype::BF16 => half::bf16::from_f32(*x).to_f32(),
                _ => half::f16::from_f32(*x).to_f32(),
            };
            assert_eq!(g.to_bits(), want.to_bits());
        }
        assert_eq!((b.m, b.hidden_size, b.n_experts), (1, 32, 3));
    }
}

/// A layer bundle round-trips with its metadata, biases, expert_map, correction bias and the
/// unquantized weights.
#[test]
fn layer_bundle_round_trips() {
    let mut spec = SynthSpec::new(Scheme::OCP_MX[3], 4, 64, 32, 2);
    spec.bias = true;
    let s = synth_layer(&spec).unwrap();
    let mut l = s.layer.clone();
    l.config.n_experts = 8;
    l.weights.expert_map = Some(vec![0, -1, 1, -1, 2, -1, 3, -1]);
    l.weights.e_score_correction_bias = Some((0..8).map(|x| x as f32 * 0.01).collect());
    l.config.router.scoring = Scoring::Sigmoid;
    l.config.router.n_group = Some(4);
    l.config.router.topk_group = Some(2);
    l.config.router.routed_scaling_factor = 2.5;
    l.config.act_scale_mode = ScaleMode::RCeil;
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("l.safetensors");
    io::save_layer(&path, &l, Some((&s.w13_f32, &s.w2_f32))).unwrap();
    let got = io::load_layer(&path).unwrap();
    let g = &got.layer;
    assert_eq!(g.config.scheme, l.config.scheme);
    assert_eq!(g.config.router, l.config.router);
    assert_eq!(g.config.act_scale_mode, ScaleMode::RCeil);
    assert_eq!(g.weights.expert_map, l.weights.expert_map);
    assert_eq!(
        g.weights.e_score_correction_bias,
        l.weights.e_score_correction_bias
    );
    assert_eq!(g.weights.w13, l.weights.w13);
    assert_eq!(g.weights.w2, l.weights.w2);
    assert_eq!(g.weights.w13_bias, l.weights.w13_bias);
    assert_eq!(got.w13_orig.as_deref(), Some(&s.w13_f32[..]));
    assert_eq!(got.w2_orig.as_deref(), Some(&s.w2_f32[..]));
    // FP6 packing in the file: [E, 2I, H*3/4] bytes.
    let f = StFile::open(&path).unwrap();
    assert_eq!(f.shape("w13_weight").unwrap(), vec![4, 64, 48]);
    assert_eq!(f.shape("w13_weight_scale").unwrap(), vec![4, 64, 2]);
    assert_eq!(f.meta("scheme"), Some("w_mxfp6_e3m2_a_mxfp6_e3m2"));
}
