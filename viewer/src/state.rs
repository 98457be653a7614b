//! The state the views are drawn from, below both the panels and the app: each view's data
//! ([`Results`], one [`Slot`] per view), the tabs, and the per-view UI choices ([`ViewUi`]).
//! `Results::compute` (every view, synchronously) lives with the worker that fills these.

use crate::analysis::{ActView, BackendView, Dataset, RoutingView, SchemeView, WeightView};
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
}

/// Everything the views show, for one dataset.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub generation: u64,
    pub dataset: Slot<Dataset>,
    pub routing: Slot<RoutingView>,
    pub acts: Slot<ActView>,
    /// `None` inside: the file has no unquantized weights.
    pub weights: Slot<Option<WeightView>>,
    pub schemes: Slot<SchemeView>,
    pub backends: Slot<BackendView>,
}

impl Results {
    pub fn all_done(&self) -> bool {
        if let Slot::Failed(_) = self.dataset {
            return true;
        }
        !(self.dataset.is_waiting()
            || self.routing.is_waiting()
            || self.acts.is_waiting()
            || self.weights.is_waiting()
            || self.schemes.is_waiting()
            || self.backends.is_waiting())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Tab {
    #[default]
    Routing,
    Weights,
    Activations,
    Schemes,
    Backends,
}

impl Tab {
    pub const ALL: [Tab; 5] = [
        Tab::Routing,
        Tab::Weights,
        Tab::Activations,
        Tab::Schemes,
        Tab::Backends,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Tab::Routing => "Routing",
            Tab::Weights => "Weight error",
            Tab::Activations => "Activation error",
            Tab::Schemes => "Schemes",
            Tab::Backends => "CPU vs GPU",
        }
    }
    pub fn slug(self) -> &'static str {
        match self {
            Tab::Routing => "routing",
            Tab::Weights => "weights",
            Tab::Activations => "activations",
            Tab::Schemes => "schemes",
            Tab::Backends => "backends",
        }
    }
    pub fn from_slug(s: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.slug() == s)
    }
}

/// Per-view UI choices (selected expert, tensor, QDQ point).
#[derive(Clone, Debug, Default)]
pub struct ViewUi {
    pub weights: WeightsUi,
    pub acts: ActsUi,
}

/// The weight view's choices.
#[derive(Clone, Debug, Default)]
pub struct WeightsUi {
    /// 0 = w13 (gate/up), 1 = w2 (down).
    pub tensor: usize,
    pub expert: usize,
}

/// The activation view's choices.
#[derive(Clone, Debug, Default)]
pub struct ActsUi {
    /// 0 = input QDQ, 1 = intermediate QDQ.
    pub point: usize,
}
