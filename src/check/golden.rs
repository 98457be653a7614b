//! The published vector set (`mxmoe golden --out DIR`, shipped under `assets/golden/`): MX
//! quantization cases with their expected scale bytes, packed codes and values, for other
//! implementations to check themselves against, under the contract and under every
//! compatibility profile.
//!
//! Three kinds of cases, each with its provenance in the manifest:
//!
//! * `hand`: every quantize entry of `assets/golden/vectors.json` (G4–G14, transcribed by hand
//!   from the tables of docs/NUMERICS.md 12), one case per format and scale mode it lists. The
//!   expected values are mxmoe's; tests/golden_set.rs checks them against the hand-written ones.
//! * `edge`: the shared edge-case inputs of the peer scripts (xref/common.py, embedded from
//!   `xref/vectors/inputs.safetensors`: zeros, −0, fp32 subnormals, scale-byte-0 blocks, near
//!   FLT_MAX, ±Inf, NaN, ties, random) under the contract, every format and mode.
//! * `profile`: the same inputs under each compatibility profile and the peer's modes; the test
//!   checks them against the peers' own vectors (xref/vectors/).
//!
//! Files: `mx_vectors.safetensors` (the tensors, named in the manifest), `manifest.json` (per
//! case: id, kind, format, scale mode, profile, description, source, the tensors and rows it
//! uses, and an FNV-1a 64 checksum of its bytes), `README.md` (how to check an implementation).
//! Generation is deterministic: the same build writes the same bytes.

use crate::format::{MxFormat, ProfileId, ScaleMode, BLOCK};
use crate::io::{self, OutTensor};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The hand-written vectors (NUMERICS.md 12), the source of the `hand` cases.
pub const VECTORS_JSON: &str = include_str!("../../assets/golden/vectors.json");
/// The peers' shared inputs (xref/common.py), the source of the `edge` and `profile` cases.
pub const XREF_INPUTS: &[u8] = include_bytes!("../../xref/vectors/inputs.safetensors");

/// File names inside the output folder.
pub const TENSORS_FILE: &str = "mx_vectors.safetensors";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const README_FILE: &str = "README.md";

/// Rows `[start, end)` of a tensor.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Rows {
    pub tensor: String,
    pub start: usize,
    pub end: usize,
}

/// One case of the manifest.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Case {
    pub id: String,
    /// `hand`, `edge` or `profile`.
    pub kind: &'static str,
    pub format: &'static str,
    pub scale_mode: &'static str,
    pub profile: &'static str,
    pub description: String,
    /// Where the inputs (and, for `hand`, the hand-written expectation) come from.
    pub source: String,
    /// Input blocks, f32 `[n, 32]`.
    pub input: Rows,
    /// E8M0 bytes `[n]` (absent for the QDQ-only peers: Quark, microxcaling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<Rows>,
    /// Packed codes `[n, block bytes]` in the profile's layout (with `scale`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packed: Option<Rows>,
    /// Expected values f32 `[n, 32]`: dequantized (`hand` cases) or the peer's QDQ output
    /// (QDQ-only peers); elsewhere decode `packed` with `scale` (NUMERICS.md 5.4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Rows>,
    /// FNV-1a 64 (hex) over the bytes of input, scale, packed, values rows, in that order.
    pub checksum: String,
}

/// The manifest.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Manifest {
    pub title: &'static str,
    pub contract: &'static str,
    pub generator: String,
    pub tensors_file: &'static str,
    pub conventions: BTreeMap<&'static str, &'static str>,
    /// Per format: the description of every `edge` input block, in row order.
    pub edge_blocks: BTreeMap<&'static str, Vec<String>>,
    /// Per profile: the implementation it reproduces and the version checked.
    pub profiles: BTreeMap<&'static str, &'static str>,
    pub cases: Vec<Case>,
}

/// FNV-1a 64 of a byte sequence.
pub fn fnv1a64<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// A tensor being built: name, row width, element size (1 or 4), bytes.
struct Tensor {
    name: String,
    width: usize,
    f32: bool,
    bytes: Vec<u8>,
}

impl Tensor {
    fn rows(&self) -> usize {
        self.bytes.len() / (self.width * if self.f32 { 4 } else { 1 })
    }
}

/// The set under construction.
#[derive(Default)]
struct Builder {
    tensors: Vec<Tensor>,
    cases: Vec<Case>,
}

impl Builder {
    fn tensor(&mut self, name: &str, width: usize, f32: bool) -> usize {
        if let Some(i) = self.tensors.iter().position(|t| t.name == name) {
            return i;
        }
        self.tensors.push(Tensor {
            name: name.into(),
            width,
            f32,
            bytes: Vec::new(),
        });
        self.tensors.len() - 1
    }
    fn push_f32(&mut self, name: &str, v: &[f32]) -> Rows {
        let i = self.tensor(name, BLOCK, true);
        let t = &mut self.tensors[i];
        let start = t.rows();
        t.bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        Rows {
            tensor: name.into(),
            start,
            end: t.rows(),
        }
    }
    fn push_u8(&mut self, name: &str, width: usize, v: &[u8]) -> Rows {
        let i = self.tensor(name, width, false);
        let t = &mut self.tensors[i];
        let start = t.rows();
        t.bytes.extend_from_slice(v);
        Rows {
            tensor: name.into(),
            start,
            end: t.rows(),
        }
    }
    fn bytes_of(&self, r: &Rows) -> &[u8] {
        let t = self
            .tensors
            .iter()
            .find(|t| t.name == r.tensor)
            .expect("tensor");
        let w = t.width * if t.f32 { 4 } else { 1 };
        &t.bytes[r.start * w..r.end * w]
    }
    #[allow(clippy::too_many_arguments)]
    fn case(
        &mut self,
        id: String,
        kind: &'static str,
        (format, mode, profile): (MxFormat, ScaleMode, ProfileId),
        description: String,
        source: String,
        input: Rows,
        scale: Option<Rows>,
        packed: Option<Rows>,
        values: Option<Rows>,
    ) {
        let parts: Vec<&[u8]> = [
            Some(&input),
            scale.as_ref(),
            packed.as_ref(),
            values.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|r| self.bytes_of(r))
        .collect();
        let checksum = format!("{:016x}", fnv1a64(parts));
        self.cases.push(Case {
            id,
            kind,
            format: format.name(),
            scale_mode: mode.name(),
            profile: profile.name(),
            description,
            source,
            input,
            scale,
            packed,
            values,
            checksum,
        });
    }
}

/// A float of vectors.json ("NaN", "-0.0", "0x3E800001", "5.0", ...).
fn parse_float(s: &str) -> Result<f32, String> {
    let t = s.trim();
    if let Some(h) = t.strip_prefix("0x") {
        return u32::from_str_radix(h, 16)
            .map(f32::from_bits)
            .map_err(|e| format!("'{s}': {e}"));
    }
    match t {
        "NaN" => Ok(f32::NAN),
        "inf" => Ok(f32::INFINITY),
        "-inf" => Ok(f32::NEG_INFINITY),
        _ => t.parse::<f32>().map_err(|e| format!("'{s}': {e}")),
    }
}

/// The blocks of every `hand` case: (entry id, note, format, mode, block).
type HandCase = (String, String, MxFormat, ScaleMode, [f32; BLOCK]);

fn hand_cases() -> Result<Vec<HandCase>, String> {
    let v: serde_json::Value = serde_json::from_str(VECTORS_JSON).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for e in v["quantize"]
        .as_array()
        .ok_or("vectors.json: no quantize list")?
    {
        let id = e["id"].as_str().unwrap_or("?").to_string();
        let note = e["note"].as_str().unwrap_or("").to_string();
        let mut block = [0f32; BLOCK];
        for (b, s) in block.iter_mut().zip(e["input"].as_array().ok_or("input")?) {
            *b = parse_float(s.as_str().ok_or("input string")?)?;
        }
        for f in e["formats"].as_array().ok_or("formats")? {
            let fmt: MxFormat = f
                .as_str()
                .unwrap_or("")
                .parse()
                .map_err(|e| format!("{e}"))?;
            for m in e["scale_modes"].as_array().ok_or("scale_modes")? {
                let mode: ScaleMode = m
                    .as_str()
                    .unwrap_or("")
                    .parse()
                    .map_err(|e| format!("{e}"))?;
                out.push((id.clone(), note.clone(), fmt, mode, block));
            }
        }
    }
    Ok(out)
}

/// The embedded edge inputs: per format, the blocks and their descriptions.
/// Per format: the input blocks and their descriptions.
type EdgeInputs = Vec<(MxFormat, Vec<f32>, Vec<String>)>;

fn edge_inputs() -> Result<EdgeInputs, String> {
    let st = safetensors::SafeTensors::deserialize(XREF_INPUTS).map_err(|e| e.to_string())?;
    let (_, meta) =
        safetensors::SafeTensors::read_metadata(XREF_INPUTS).map_err(|e| e.to_string())?;
    let cases: serde_json::Value = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("cases"))
        .and_then(|c| serde_json::from_str(c).ok())
        .ok_or("xref/vectors/inputs.safetensors: no cases metadata")?;
    let mut out = Vec::new();
    for fmt in MxFormat::ALL {
        let t = st
            .tensor(fmt.name())
            .map_err(|e| format!("{}: {e}", fmt.name()))?;
        let x: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let desc: Vec<String> = cases[fmt.name()]
            .as_array()
            .ok_or("cases per format")?
            .iter()
            .map(|s| s.as_str().unwrap_or("").to_string())
            .collect();
        if desc.len() * BLOCK != x.len() {
            return Err(format!(
                "{}: {} blocks, {} descriptions",
                fmt.name(),
                x.len() / BLOCK,
                desc.len()
            ));
        }
        out.push((fmt, x, desc));
    }
    Ok(out)
}

/// Quantize blocks under a profile: (scale bytes, packed codes, values) where the peer gives
/// them. QDQ-only peers give values only; coded peers give scale and packed bytes.
fn run_profile(
    p: ProfileId,
    fmt: MxFormat,
    mode: ScaleMode,
    x: &[f32],
) -> (Vec<u8>, Vec<u8>, Vec<f32>, bool) {
    let spec = p.spec();
    let bb = fmt.spec().block_bytes();
    let coded = !matches!(
        spec.engine,
        crate::format::Engine::Quark | crate::format::Engine::Microxcaling(_)
    );
    let (mut scales, mut packed, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for xb in x.chunks_exact(BLOCK) {
        let b = spec.block(fmt, mode, xb);
        if coded {
            scales.push(b.byte.unwrap_or(crate::format::SCALE_NAN));
            let mut out = vec![0u8; bb];
            spec.pack(fmt, &b.codes, &mut out);
            packed.extend(out);
        } else {
            values.extend_from_slice(&b.qdq);
        }
    }
    (scales, packed, values, coded)
}

/// Build the whole set: the tensors (in creation order) and the manifest.
pub fn build() -> Result<(Vec<OutTensor>, Manifest), String> {
    let mut b = Builder::default();
    // 1. hand cases.
    let mut n_per: HashMap<(String, MxFormat, ScaleMode), usize> = HashMap::new();
    for (id, note, fmt, mode, block) in hand_cases()? {
        let k = n_per.entry((id.clone(), fmt, mode)).or_default();
        *k += 1;
        let cid = format!("hand/{id}.{k}/{}/{mode}", fmt.name());
        let f = fmt.name();
        let input = b.push_f32(&format!("hand/{f}/input"), &block);
        let blk = ProfileId::Contract.spec().block(fmt, mode, &block);
        let scale = b.push_u8(&format!("hand/{f}/scale"), 1, &[blk.byte.unwrap_or(0)]);
        let mut pk = vec![0u8; fmt.spec().block_bytes()];
        crate::format::pack_codes(fmt, &blk.codes, &mut pk);
        let packed = b.push_u8(&format!("hand/{f}/packed"), pk.len(), &pk);
        let values = b.push_f32(&format!("hand/{f}/dequant"), &blk.qdq);
        b.case(
            cid,
            "hand",
            (fmt, mode, ProfileId::Contract),
            note,
            format!("docs/NUMERICS.md 12 {id} (assets/golden/vectors.json)"),
            input,
            Some(scale),
            Some(packed),
            Some(values),
        );
    }
    // 2. edge cases under the contract, 3. under every profile.
    let inputs = edge_inputs()?;
    let mut edge_blocks = BTreeMap::new();
    for (fmt, x, desc) in &inputs {
        let f = fmt.name();
        let input = b.push_f32(&format!("edge/{f}/input"), x);
        edge_blocks.insert(f, desc.clone());
        for p in ProfileId::ALL {
            let spec = p.spec();
            if !spec.formats.contains(fmt) {
                continue;
            }
            let modes: Vec<ScaleMode> = match p {
                ProfileId::Contract => ScaleMode::ALL.to_vec(),
                _ => spec.modes.to_vec(),
            };
            for mode in modes {
                let (scales, packed, values, coded) = run_profile(p, *fmt, mode, x);
                let base = format!("{}/{f}/{mode}", p.name());
                let (s, pk, v) = if coded {
                    let bb = fmt.spec().block_bytes();
                    (
                        Some(b.push_u8(&format!("{base}/scale"), 1, &scales)),
                        Some(b.push_u8(&format!("{base}/packed"), bb, &packed)),
                        None,
                    )
                } else {
                    (
                        None,
                        None,
                        Some(b.push_f32(&format!("{base}/qdq"), &values)),
                    )
                };
                let (kind, source) = match p {
                    ProfileId::Contract => (
                        "edge",
                        "xref/common.py inputs; expected values: the contract (NUMERICS.md 5)"
                            .to_string(),
                    ),
                    _ => (
                        "profile",
                        format!("xref/common.py inputs; reproduces {}", spec.peer),
                    ),
                };
                b.case(
                    format!("{kind}/{}/{f}/{mode}", p.name()),
                    kind,
                    (*fmt, mode, p),
                    format!("{} edge-case blocks (manifest edge_blocks)", desc.len()),
                    source,
                    input.clone(),
                    s,
                    pk,
                    v,
                );
            }
        }
    }
    let manifest = Manifest {
        title: "mxmoe MX quantization vectors",
        contract: "docs/NUMERICS.md (section 5: the contract; 17: the compatibility profiles)",
        generator: format!("mxmoe {} (mxmoe golden)", env!("CARGO_PKG_VERSION")),
        tensors_file: TENSORS_FILE,
        conventions: BTreeMap::from([
            ("block", "32 contiguous f32 values along the last axis; every tensor row is one block"),
            ("scale", "E8M0 byte: 2^(byte - 127); byte 0 = 2^-127, byte 255 = NaN (contract)"),
            ("packed", "FP4 element 2i in the low nibble of byte i (ggml profile: byte j holds elements j and j+16); FP6 w = c0 | c1<<6 | c2<<12 | c3<<18 little-endian in 3 bytes; FP8/INT8 one byte each"),
            ("values", "bit-exact f32, the sign of zero included; any NaN matches NaN"),
            ("checksum", "FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3) over the little-endian bytes of the input, scale, packed and values rows, in that order"),
        ]),
        edge_blocks,
        profiles: ProfileId::ALL.iter().map(|p| (p.name(), p.spec().peer)).collect(),
        cases: b.cases,
    };
    let tensors = b
        .tensors
        .into_iter()
        .map(|t| {
            let rows = t.rows();
            if t.f32 {
                let v: Vec<f32> = t
                    .bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                OutTensor::f32(t.name, vec![rows, t.width], &v)
            } else if t.width == 1 {
                OutTensor::u8(t.name, vec![rows], &t.bytes)
            } else {
                OutTensor::u8(t.name, vec![rows, t.width], &t.bytes)
            }
        })
        .collect();
    Ok((tensors, manifest))
}

/// The manifest as JSON: pretty, except one line per case (the file stays small and diffable).
pub fn manifest_json(m: &Manifest) -> Result<String, String> {
    let mut head = serde_json::to_value(m).map_err(|e| e.to_string())?;
    let cases = head
        .as_object_mut()
        .and_then(|o| o.remove("cases"))
        .ok_or("manifest without cases")?;
    let text = serde_json::to_string_pretty(&head).map_err(|e| e.to_string())?;
    let body = text
        .strip_suffix("\n}")
        .or_else(|| text.strip_suffix('}'))
        .ok_or("manifest JSON")?;
    let lines: Vec<String> = cases
        .as_array()
        .ok_or("cases")?
        .iter()
        .map(|c| serde_json::to_string(c).map(|l| format!("    {l}")))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{body},\n  \"cases\": [\n{}\n  ]\n}}\n",
        lines.join(",\n")
    ))
}

/// The README written beside the vectors.
pub const README: &str = include_str!("golden_readme.md");

/// Write the set into `dir` (created if missing): the tensors, the manifest, the README.
pub fn write(dir: &Path) -> Result<Manifest, String> {
    let (tensors, manifest) = build()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut meta = HashMap::new();
    meta.insert("manifest".to_string(), MANIFEST_FILE.to_string());
    io::save(&dir.join(TENSORS_FILE), &tensors, meta).map_err(|e| e.to_string())?;
    let json = manifest_json(&manifest)?;
    for (name, text) in [(MANIFEST_FILE, json.as_str()), (README_FILE, README)] {
        let p = dir.join(name);
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &p))
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(manifest)
}
