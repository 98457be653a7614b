//! Loader validation beyond the `safetensors` crate's: what a file may not say (refused, with
//! file, tensor or key, expected and found) and what it may say but almost certainly means a
//! broken checkpoint (a warning naming tensor, expert and count, recorded in results).
//!
//! * [`check_header`]: the JSON header parsed here, because the crate reads it into a map and
//!   keeps the last of duplicate keys silently; the safetensors format (its README, "Format":
//!   "a JSON UTF-8 string representing the header ... a dictionary") has one entry per tensor
//!   name, so a duplicate tensor name or metadata key is refused.
//! * [`check_layer`]: a loaded layer's routing keys and tables (`routed_scaling_factor`,
//!   `expert_map`, the metadata's `n_experts`) and its data (NaN weight blocks: scale byte 0xFF,
//!   the E8M0 NaN of the OCP MX spec v1.0 section 5.4; non-finite biases).

use super::IoError;
use crate::format::MxTensor;
use crate::moe::MoeLayer;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Keys of a JSON object, checked for duplicates; for `__metadata__`, its keys too.
struct Keys {
    /// The first duplicate found: (where, key).
    dup: Option<(String, String)>,
    tensors: usize,
}

struct KeysVisitor;

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Keys;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object (tensor name -> info, and __metadata__)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
        let mut seen = HashSet::new();
        let mut out = Keys {
            dup: None,
            tensors: 0,
        };
        while let Some(k) = map.next_key::<String>()? {
            if k == "__metadata__" {
                if let Some(d) = map.next_value::<MetaKeys>()?.0 {
                    out.dup.get_or_insert(("__metadata__".into(), d));
                }
            } else {
                map.next_value::<IgnoredAny>()?;
                out.tensors += 1;
            }
            if !seen.insert(k.clone()) {
                out.dup.get_or_insert(("the header".into(), k));
            }
        }
        Ok(out)
    }
}

impl<'de> de::Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
        d.deserialize_map(KeysVisitor)
    }
}

/// The first duplicate key of `__metadata__`, if any.
struct MetaKeys(Option<String>);

impl<'de> de::Deserialize<'de> for MetaKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MetaKeys, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetaKeys;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of string keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaKeys, A::Error> {
                let mut seen = HashSet::new();
                let mut dup = None;
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    if !seen.insert(k.clone()) {
                        dup.get_or_insert(k);
                    }
                }
                Ok(MetaKeys(dup))
            }
            fn visit_unit<E: de::Error>(self) -> Result<MetaKeys, E> {
                Ok(MetaKeys(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Check a safetensors file's JSON header for duplicate keys (tensor names or metadata keys),
/// which the format does not allow and the `safetensors` crate would resolve silently. Returns
/// the number of tensors the header declares. Structural errors are left to the crate's parser
/// (whose messages are then reported), so only duplicates are reported here.
pub fn check_header(path: &str, bytes: &[u8]) -> Result<usize, IoError> {
    let Some(n) = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    else {
        return Ok(0);
    };
    let Some(header) = usize::try_from(n)
        .ok()
        .and_then(|n| bytes.get(8..8usize.checked_add(n)?))
    else {
        return Ok(0);
    };
    let Ok(keys) = serde_json::from_slice::<Keys>(header) else {
        return Ok(0);
    };
    match keys.dup {
        Some((place, key)) => Err(IoError::Corrupt {
            path: path.into(),
            msg: format!(
                "duplicate key '{key}' in {place} (a safetensors header has one entry per \
                 tensor name and metadata key; which one is meant is ambiguous)"
            ),
        }),
        None => Ok(keys.tensors),
    }
}

/// A loaded layer's data that is legal but almost certainly a broken checkpoint: NaN weight
/// blocks or non-finite biases. The command runs, prints it and records it in its result.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWarning {
    /// The tensor, e.g. `w13_weight_scale` or `model.layers.3.mlp.experts.down_proj_bias`.
    pub tensor: String,
    /// The experts affected with their counts, in order.
    pub experts: Vec<(usize, usize)>,
    /// What is wrong, in words (`NaN blocks (scale byte 0xFF)`, `non-finite values`).
    pub what: &'static str,
}

impl fmt::Display for LayerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total: usize = self.experts.iter().map(|e| e.1).sum();
        write!(
            f,
            "{}: {total} {} in {} expert(s): ",
            self.tensor,
            self.what,
            self.experts.len()
        )?;
        let shown: Vec<String> = self
            .experts
            .iter()
            .take(8)
            .map(|(e, n)| format!("expert {e} ({n})"))
            .collect();
        f.write_str(&shown.join(", "))?;
        if self.experts.len() > 8 {
            write!(f, ", ...")?;
        }
        Ok(())
    }
}

/// Per expert (the leading axis, `el` experts), how many items of `per_expert` each satisfy
/// `bad`; only experts with at least one.
fn per_expert<T>(v: &[T], el: usize, bad: impl Fn(&T) -> bool) -> Vec<(usize, usize)> {
    if el == 0 || v.is_empty() {
        return Vec::new();
    }
    let per = v.len() / el;
    v.chunks(per.max(1))
        .enumerate()
        .map(|(e, c)| (e, c.iter().filter(|x| bad(x)).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The names a layer's tensors have in its file (they differ between conventions).
pub struct LayerNames<'a> {
    pub w13_scale: &'a str,
    pub w2_scale: &'a str,
    pub w13_bias: &'a str,
    pub w2_bias: &'a str,
    pub expert_map: &'a str,
    pub correction_bias: &'a str,
}

/// Check a loaded layer (the checks [`MoeLayer::validate`] cannot make, with messages naming
/// the file's keys and tensors): refuse what is invalid, return warnings for what is legal but
/// broken. `path` names the file (or model) in messages; `meta_n_experts` is the `n_experts`
/// metadata key of a layer bundle, when it has one.
pub fn check_layer(
    path: &str,
    l: &MoeLayer,
    names: &LayerNames<'_>,
    meta_n_experts: Option<usize>,
) -> Result<Vec<LayerWarning>, IoError> {
    let meta_err = |key: &str, msg: String| IoError::Meta {
        path: path.to_string(),
        key: key.into(),
        msg,
    };
    let r = &l.config.router;
    let s = r.routed_scaling_factor;
    if !(s.is_finite() && s > 0.0) {
        return Err(meta_err(
            "routed_scaling_factor",
            format!("expected a finite number > 0 (it multiplies the routing weights), found {s}"),
        ));
    }
    if let Some(m) = &l.weights.expert_map {
        if let Some(n) = meta_n_experts {
            if n != m.len() {
                return Err(meta_err(
                    "n_experts",
                    format!(
                        "the metadata says {n} experts but tensor '{}' has {} entries (one per \
                         router expert)",
                        names.expert_map,
                        m.len()
                    ),
                ));
            }
        }
        let el = l.config.local_experts;
        let mut first = vec![None; el];
        for (g, &v) in m.iter().enumerate() {
            if v == -1 {
                continue;
            }
            if v < -1 {
                return Err(IoError::Invalid {
                    path: path.to_string(),
                    msg: format!(
                        "expert_map entry {v} (global expert {g}) is outside [-1, {el}) (-1 \
                         marks an expert of another rank)"
                    ),
                });
            }
            let Some(slot) = first.get_mut(v as usize) else {
                return Err(IoError::Invalid {
                    path: path.to_string(),
                    msg: format!(
                        "expert_map entry {v} (global expert {g}) is outside [-1, {el}): the \
                         weights hold {el} local experts"
                    ),
                });
            };
            if let Some(g0) = *slot {
                return Err(IoError::Invalid {
                    path: path.to_string(),
                    msg: format!(
                        "tensor '{}': global experts {g0} and {g} both map to local expert {v} \
                         (expected each local expert at most once)",
                        names.expert_map
                    ),
                });
            }
            *slot = Some(g);
        }
        let mapped = first.iter().filter(|x| x.is_some()).count();
        if mapped != el {
            let unmapped: Vec<String> = first
                .iter()
                .enumerate()
                .filter(|(_, x)| x.is_none())
                .take(8)
                .map(|(e, _)| e.to_string())
                .collect();
            return Err(IoError::Invalid {
                path: path.to_string(),
                msg: format!(
                    "tensor '{}' maps {mapped} global experts to local ones, but the weights \
                     hold {el} local experts (expected every local expert mapped once; \
                     unmapped: {}{})",
                    names.expert_map,
                    unmapped.join(", "),
                    if el - mapped > 8 { ", ..." } else { "" }
                ),
            });
        }
    }
    if let Some(b) = &l.weights.e_score_correction_bias {
        if let Some(p) = b.iter().position(|v| !v.is_finite()) {
            return Err(IoError::Invalid {
                path: path.to_string(),
                msg: format!(
                    "tensor '{}': entry {p} is {} (expected finite values: the bias decides \
                     which experts are selected)",
                    names.correction_bias,
                    b[p]
                ),
            });
        }
    }
    let el = l.config.local_experts;
    let mut warn = Vec::new();
    let nan_blocks = |t: &MxTensor, name: &str, warn: &mut Vec<LayerWarning>| {
        let experts = per_expert(&t.scales, el, |&b| b == 0xFF);
        if !experts.is_empty() {
            warn.push(LayerWarning {
                tensor: name.to_string(),
                experts,
                what: "NaN blocks (scale byte 0xFF)",
            });
        }
    };
    nan_blocks(&l.weights.w13, names.w13_scale, &mut warn);
    nan_blocks(&l.weights.w2, names.w2_scale, &mut warn);
    for (b, name) in [
        (&l.weights.w13_bias, names.w13_bias),
        (&l.weights.w2_bias, names.w2_bias),
    ] {
        if let Some(b) = b {
            let experts = per_expert(b, el, |v: &f32| !v.is_finite());
            if !experts.is_empty() {
                warn.push(LayerWarning {
                    tensor: name.to_string(),
                    experts,
                    what: "non-finite values (NaN or Inf)",
                });
            }
        }
    }
    Ok(warn)
}
