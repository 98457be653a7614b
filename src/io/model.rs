//! Model checkpoints as people have them: a directory in the Hugging Face layout
//! (`model.safetensors.index.json` + shards, or `*.safetensors` files, with `config.json`), a
//! single (multi-layer) safetensors file, a layer bundle, or a llama.cpp GGUF file. The MoE
//! layers are found by naming convention (`super::conventions`), listed ([`list_layers`],
//! `mxmoe layers`) and loaded one at a time by a [`LayerQuery`] ([`load_layer_with`]).
//!
//! Every shard is memory-mapped; listing reads headers only.

use super::conventions::{self, LayerInfo};
use super::stfile::list_names;
use super::{gguf, os, IoError, LoadedLayer, StFile};
use crate::scheme::Scheme;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Which layer to load and how to read it.
#[derive(Clone, Debug, Default)]
pub struct LayerQuery {
    /// The model's layer number (`model.layers.N`, `block.N`, `blk.N`), or the position in the
    /// listing for names without one.
    pub index: Option<usize>,
    /// A layer name (as `mxmoe layers` prints it) or a prefix of one that matches one layer.
    pub name: Option<String>,
    /// The scheme, overriding metadata, `config.json` and inference.
    pub scheme: Option<Scheme>,
}

/// The safetensors files of a checkpoint, as one set of tensor names.
pub struct Store {
    /// What the user gave (file or directory), for messages.
    pub root: String,
    files: Vec<StFile>,
    /// Tensor name -> index into `files`.
    index: HashMap<String, usize>,
    names: Vec<String>,
    /// `config.json` of the model, when there is one.
    pub config: Option<serde_json::Value>,
}

impl Store {
    /// Open a safetensors file or a model directory (not GGUF: see [`open_model`]).
    pub fn open(path: &Path) -> Result<Store, IoError> {
        let root = path.display().to_string();
        let md = std::fs::metadata(path).map_err(|e| os(path, e))?;
        let (files, config_dir) = if md.is_dir() {
            (shard_paths(path)?, Some(path.to_path_buf()))
        } else {
            // A file's config.json counts when the file is a model file (model*.safetensors).
            let is_model = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("model"));
            let dir = path.parent().map(Path::to_path_buf);
            (vec![path.to_path_buf()], dir.filter(|_| is_model))
        };
        let config = match config_dir.map(|d| d.join("config.json")) {
            Some(c) if c.is_file() => Some(read_json(&c)?),
            _ => None,
        };
        let mut store = Store {
            root,
            files: Vec::new(),
            index: HashMap::new(),
            names: Vec::new(),
            config,
        };
        for p in files {
            let f = StFile::open(&p)?;
            let fi = store.files.len();
            for n in f.names_ref() {
                if let Some(&other) = store.index.get(n) {
                    return Err(IoError::Invalid {
                        path: store.root.clone(),
                        msg: format!(
                            "tensor '{n}' is in two shards: {} and {}",
                            store.files[other].path, f.path
                        ),
                    });
                }
                store.index.insert(n.clone(), fi);
            }
            store.files.push(f);
        }
        store.names = store.index.keys().cloned().collect();
        store.names.sort();
        Ok(store)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The shard holding `name`.
    pub fn file(&self, name: &str) -> Result<&StFile, IoError> {
        match self.index.get(name) {
            Some(&i) => Ok(&self.files[i]),
            None => Err(IoError::Missing {
                path: self.root.clone(),
                tensor: name.into(),
                hint: format!(" (tensors: {})", list_names(&self.names)),
            }),
        }
    }

    /// The only file, when the store is one file (layer bundles keep their metadata there).
    pub fn single_file(&self) -> Option<&StFile> {
        (self.files.len() == 1).then(|| &self.files[0])
    }

    /// Paths of every shard.
    pub fn paths(&self) -> Vec<&str> {
        self.files.iter().map(|f| f.path.as_str()).collect()
    }
}

fn read_json(p: &Path) -> Result<serde_json::Value, IoError> {
    let text = std::fs::read_to_string(p).map_err(|e| os(p, e))?;
    serde_json::from_str(&text).map_err(|e| IoError::Invalid {
        path: p.display().to_string(),
        msg: format!("not valid JSON: {e}"),
    })
}

/// The shards of a model directory: those `model.safetensors.index.json` names (each checked
/// to hold the tensors the index puts there, after opening), else every `*.safetensors` file.
fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>, IoError> {
    let idx = dir.join("model.safetensors.index.json");
    if idx.is_file() {
        let v = read_json(&idx)?;
        let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(IoError::Invalid {
                path: idx.display().to_string(),
                msg: "no \"weight_map\" object (tensor name -> shard file)".into(),
            });
        };
        let mut shards: Vec<String> = Vec::new();
        for (t, f) in map {
            let Some(f) = f.as_str() else {
                return Err(IoError::Invalid {
                    path: idx.display().to_string(),
                    msg: format!("weight_map['{t}'] is not a file name"),
                });
            };
            if f.contains('/') || f.contains('\\') || f == ".." {
                return Err(IoError::Invalid {
                    path: idx.display().to_string(),
                    msg: format!("weight_map['{t}'] = '{f}' is not a file of this directory"),
                });
            }
            if !shards.iter().any(|s| s == f) {
                shards.push(f.to_string());
            }
        }
        shards.sort();
        let paths: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
        for p in &paths {
            if !p.is_file() {
                return Err(IoError::Invalid {
                    path: idx.display().to_string(),
                    msg: format!("names shard '{}', which is missing", p.display()),
                });
            }
        }
        return Ok(paths);
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| os(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors") && p.is_file())
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(IoError::Invalid {
            path: dir.display().to_string(),
            msg: "no model.safetensors.index.json, *.safetensors or *.gguf file in this directory"
                .into(),
        });
    }
    Ok(paths)
}

/// Whether `path` is a GGUF file (by its magic), or a directory holding exactly one GGUF file
/// and no safetensors file; returns the GGUF path.
fn gguf_path(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return gguf::is_gguf(path).then(|| path.to_path_buf());
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    if entries
        .iter()
        .any(|p| p.extension().is_some_and(|x| x == "safetensors"))
    {
        return None;
    }
    let ggufs: Vec<&PathBuf> = entries
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    (ggufs.len() == 1).then(|| ggufs[0].clone())
}

/// An opened checkpoint: safetensors (one file or a directory) or GGUF.
pub enum Model {
    Safetensors(Store),
    Gguf(gguf::GgufFile),
}

/// Open a checkpoint (file or directory) of any supported kind.
pub fn open_model(path: &Path) -> Result<Model, IoError> {
    if let Some(g) = gguf_path(path) {
        return Ok(Model::Gguf(gguf::GgufFile::open(&g)?));
    }
    Ok(Model::Safetensors(Store::open(path)?))
}

/// The MoE layers of a checkpoint, in layer order (headers only; no weight is read).
pub fn list_layers(path: &Path, scheme: Option<Scheme>) -> Result<Vec<LayerInfo>, IoError> {
    match open_model(path)? {
        Model::Safetensors(s) => conventions::find_layers(&s, scheme),
        Model::Gguf(g) => g.layers(scheme),
    }
}

/// Load one MoE layer of a checkpoint. Without `index`/`name` the checkpoint must hold exactly
/// one MoE layer.
pub fn load_layer_with(path: &Path, q: &LayerQuery) -> Result<LoadedLayer, IoError> {
    match open_model(path)? {
        Model::Safetensors(s) => {
            let layers = conventions::find_layers(&s, q.scheme)?;
            let info = select(&s.root, &layers, q)?;
            conventions::load(&s, info)
        }
        Model::Gguf(g) => {
            let layers = g.layers(q.scheme)?;
            let info = select(&g.path, &layers, q)?;
            g.load(info)
        }
    }
}

/// The layer a query names, or an error listing the layers there are.
pub fn select<'a>(
    root: &str,
    layers: &'a [LayerInfo],
    q: &LayerQuery,
) -> Result<&'a LayerInfo, IoError> {
    let listing = || {
        let l: Vec<String> = layers
            .iter()
            .map(|l| format!("{} ({})", l.index, l.name))
            .collect();
        list_names(&l)
    };
    let err = |msg: String| IoError::Invalid {
        path: root.to_string(),
        msg,
    };
    let mut cands: Vec<&LayerInfo> = layers.iter().collect();
    if let Some(i) = q.index {
        cands.retain(|l| l.index == i);
        if cands.is_empty() {
            return Err(err(format!(
                "no MoE layer with index {i}; the layers are: {}",
                listing()
            )));
        }
    }
    if let Some(n) = &q.name {
        let exact: Vec<&LayerInfo> = cands.iter().copied().filter(|l| &l.name == n).collect();
        let dotted = format!("{}.", n.trim_end_matches('.'));
        let bounded: Vec<&LayerInfo> = cands
            .iter()
            .copied()
            .filter(|l| format!("{}.", l.name).starts_with(&dotted))
            .collect();
        let prefix: Vec<&LayerInfo> = cands
            .iter()
            .copied()
            .filter(|l| l.name.starts_with(n.as_str()))
            .collect();
        cands = if !exact.is_empty() {
            exact
        } else if !bounded.is_empty() {
            bounded
        } else {
            prefix
        };
        if cands.is_empty() {
            return Err(err(format!(
                "no MoE layer named '{n}' or starting with it; the layers are: {}",
                listing()
            )));
        }
    }
    match cands.len() {
        1 => Ok(cands[0]),
        0 => Err(err("no MoE layer found".into())),
        n => Err(err(format!(
            "{n} MoE layers match; pick one with --layer-index N or --layer-name PREFIX: {}",
            {
                let l: Vec<String> = cands
                    .iter()
                    .map(|l| format!("{} ({})", l.index, l.name))
                    .collect();
                list_names(&l)
            }
        ))),
    }
}
