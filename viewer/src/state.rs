//! The state the views are drawn from, below both the panels and the app: each view's data
//! ([`Results`], one [`Slot`] per view), the tabs, and the per-view UI choices ([`ViewUi`]).
//! `Results::compute` (every view, synchronously) lives with the worker that fills these.

use crate::analysis::{
    ActView, BackendView, Dataset, ModelRouting, PackedView, RoutingView, SchemeView, WeightView,
};
use std::sync::Arc;

/// A view's data: not computed yet, ready, or failed with a message.
#[derive(Clone, Debug, Default)]
pub enum Slot<T> {
    #[default]
    Waiting,
    Ready(Arc<T>),
    Failed(String),
}

impl<T> Slot<T> {
    pub fn is_waiting(&self) -> bool {
        matches!(self, Slot::Waiting)
    }
    pub fn ready(&self) -> Option<&T> {
        match self {
            Slot::Ready(v) => Some(v),
            _ => None,
        }
    }
}

/// Everything the views show, for one dataset.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub generation: u64,
    pub dataset: Slot<Dataset>,
    pub routing: Slot<RoutingView>,
    pub acts: Slot<ActView>,
    /// The packed weights' own statistics (codes, scales, re-quantization): no originals needed.
    pub packed: Slot<PackedView>,
    /// Error against the unquantized weights; `None` inside: the file has none.
    pub weights: Slot<Option<WeightView>>,
    pub schemes: Slot<SchemeView>,
    pub backends: Slot<BackendView>,
    /// Routing of every MoE layer of the checkpoint.
    pub model: Slot<ModelRouting>,
}

impl Results {
    /// Every view computed (or failed), or the dataset failed.
    pub fn all_done(&self) -> bool {
        Tab::ALL.iter().all(|&t| self.tab_done(t))
    }

    /// The views of `tab` are computed (or failed), or the dataset failed: views are computed
    /// when their tab is first shown.
    pub fn tab_done(&self, tab: Tab) -> bool {
        if let Slot::Failed(_) = self.dataset {
            return true;
        }
        if self.dataset.is_waiting() {
            return false;
        }
        match tab {
            Tab::Routing => !self.routing.is_waiting(),
            Tab::Weights => !(self.packed.is_waiting() || self.weights.is_waiting()),
            Tab::Activations => !self.acts.is_waiting(),
            Tab::Schemes => !self.schemes.is_waiting(),
            Tab::Backends => !self.backends.is_waiting(),
            Tab::Model => !self.model.is_waiting(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Tab {
    #[default]
    Routing,
    Weights,
    Activations,
    Schemes,
    Backends,
    Model,
}

impl Tab {
    pub const ALL: [Tab; 6] = [
        Tab::Routing,
        Tab::Model,
        Tab::Weights,
        Tab::Activations,
        Tab::Schemes,
        Tab::Backends,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Tab::Routing => "Routing",
            Tab::Weights => "Weights",
            Tab::Activations => "Activation error",
            Tab::Schemes => "Schemes",
            Tab::Backends => "CPU vs GPU",
            Tab::Model => "All layers",
        }
    }
    pub fn slug(self) -> &'static str {
        match self {
            Tab::Routing => "routing",
            Tab::Weights => "weights",
            Tab::Activations => "activations",
            Tab::Schemes => "schemes",
            Tab::Backends => "backends",
            Tab::Model => "model",
        }
    }
    pub fn from_slug(s: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.slug() == s)
    }
}

/// Per-view UI choices (selected expert, tensor, QDQ point), and a view the user asked to
/// compute again after cancelling it (read by the app).
#[derive(Clone, Debug, Default)]
pub struct ViewUi {
    pub weights: WeightsUi,
    pub acts: ActsUi,
    pub retry: Option<Tab>,
}

/// The weight view's choices.
#[derive(Clone, Debug, Default)]
pub struct WeightsUi {
    /// 0 = w13 (gate/up), 1 = w2 (down).
    pub tensor: usize,
    pub expert: usize,
    /// Which part: codes and scales, re-quantization, or error against the originals.
    pub section: WeightSection,
}

/// The parts of the weight view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightSection {
    /// The stored codes and scales (no originals needed).
    #[default]
    Packed,
    /// The error of re-quantizing the stored values under every format and mode.
    Requant,
    /// The error against the unquantized weights (`*_orig`), under every scale rule.
    Error,
}

/// The activation view's choices.
#[derive(Clone, Debug, Default)]
pub struct ActsUi {
    /// 0 = input QDQ, 1 = intermediate QDQ.
    pub point: usize,
}
