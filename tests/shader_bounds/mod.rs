//! A small abstract interpreter over naga IR (intervals of integers), used by tests/shaders.rs
//! to prove what wgpu's runtime checks would otherwise enforce for the entry points the backend
//! builds without them (`COOP_TRUSTED_ENTRIES`, src/backend/wgpu/coop.rs):
//!
//! * every dynamic index into a fixed-size array (workgroup, private, function or value) or a
//!   vector lies in range (what naga's `BoundsCheckPolicy::Restrict` would clamp),
//! * every cooperative-matrix load and store stays inside its workgroup array over its whole
//!   extent (no runtime check covers those, trusted or not),
//! * every loop ends: it is a counted loop `for (var v = ..; v < B && ..; v = v + c)` (naga's
//!   lowering: a leading `if cond {} else { break; }` in the body and the increment in the
//!   continuing block), c a positive constant, no other store to v in the body, and B's upper
//!   bound + c - 1 fits the counter's type (so v never wraps: what naga's loop bounding guards).
//!
//! Values are intervals of i64 per integer scalar (vectors and structs component-wise); floats,
//! storage loads, atomics and subgroup results are unknown (the full range of their type). The
//! analysis is flow-sensitive over local variables (joins at merges, loops to a fixpoint with
//! widening), refines on `if` conditions (comparisons of an argument, a `let` or a just-loaded
//! local with a bound), follows `if`s whose condition is a constant (override values after
//! specialisation) into one branch only, and analyses each call with its arguments' intervals
//! (no recursion in WGSL). Storage buffers are not checked (runtime-sized: the driver's robust
//! buffer access covers them on Vulkan either way).
//!
//! Files: interval.rs (the values: intervals, joins, the integer operations), eval.rs
//! (expressions), walk.rs (statements: emits, branches, switches, calls, loads and stores of
//! locals), refine.rs (intervals narrowed on `if` conditions), loops.rs (the counted-loop shape,
//! the fixpoint with widening, the wrap check), checks.rs (index and cooperative-extent checks,
//! violations); this one the report, the analysis state and the entry points.

mod checks;
mod eval;
mod interval;
mod loops;
mod refine;
mod walk;

pub use interval::V;

use interval::{join, range_of};
use naga::{Function, Handle, Module};
use std::collections::HashMap;

/// What the analysis found.
#[derive(Default, Debug)]
pub struct Report {
    /// Indices, extents or loops it could not prove (empty: proved).
    pub violations: Vec<String>,
    /// Dynamic indices into fixed-size arrays / vectors it proved in range (function, index
    /// expression, whether into workgroup memory).
    pub indices: std::collections::HashSet<(String, Handle<naga::Expression>, bool)>,
    /// Cooperative loads and stores proved inside their array (function, pointer).
    pub coop_extents: std::collections::HashSet<(String, Handle<naga::Expression>)>,
    /// Loops proved to end (function, counter).
    pub loops: std::collections::HashSet<(String, Handle<naga::LocalVariable>)>,
}

#[derive(Clone, Debug, PartialEq, Default)]
struct State {
    locals: HashMap<Handle<naga::LocalVariable>, V>,
    /// Intervals known for expression handles (arguments, lets, loads) on this path.
    refine: HashMap<Handle<naga::Expression>, (i64, i64)>,
    /// Store generation per local (a refinement through a load holds while it is unchanged).
    gen: HashMap<Handle<naga::LocalVariable>, u32>,
}

fn join_state(a: Option<State>, b: Option<State>) -> Option<State> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            let mut locals = a.locals.clone();
            for (k, v) in &b.locals {
                let j = match a.locals.get(k) {
                    Some(x) => join(x, v),
                    None => v.clone(),
                };
                locals.insert(*k, j);
            }
            let refine = a
                .refine
                .iter()
                .filter_map(|(k, (l, h))| {
                    b.refine
                        .get(k)
                        .map(|(l2, h2)| (*k, ((*l).min(*l2), (*h).max(*h2))))
                })
                .collect();
            let mut gen = a.gen.clone();
            for (k, g) in &b.gen {
                let e = gen.entry(*k).or_insert(0);
                *e = (*e).max(*g) + 1;
            }
            Some(State {
                locals,
                refine,
                gen,
            })
        }
    }
}

struct Frame {
    is_loop: bool,
    breaks: Option<State>,
    continues: Option<State>,
    /// The guard of a counted loop: (condition handle, bound handle) and the bound's largest
    /// upper end seen.
    guard: Option<(Handle<naga::Expression>, Handle<naga::Expression>)>,
    bound_hi: Option<i64>,
}

pub struct Analyzer<'a> {
    pub m: &'a Module,
    pub info: &'a naga::valid::ModuleInfo,
    pub report: Report,
    depth: usize,
}

struct Fx<'a> {
    f: &'a Function,
    fi: &'a naga::valid::FunctionInfo,
    name: String,
    args: Vec<V>,
    /// Values of loads, call results (set where emitted / called).
    cache: HashMap<Handle<naga::Expression>, V>,
    /// Loads of a local: (local, its store generation at the load).
    load_of: HashMap<Handle<naga::Expression>, (Handle<naga::LocalVariable>, u32)>,
    ret: Option<V>,
    frames: Vec<Frame>,
}

impl Report {
    /// Distinct indices proved into workgroup arrays.
    pub fn workgroup_indices(&self) -> usize {
        self.indices.iter().filter(|k| k.2).count()
    }
}

impl<'a> Analyzer<'a> {
    pub fn new(m: &'a Module, info: &'a naga::valid::ModuleInfo) -> Self {
        Analyzer {
            m,
            info,
            report: Report::default(),
            depth: 0,
        }
    }

    /// Analyse entry point `entry` (workgroup size from its attribute).
    pub fn entry(&mut self, entry: &str) {
        let (i, ep) = self
            .m
            .entry_points
            .iter()
            .enumerate()
            .find(|(_, e)| e.name == entry)
            .unwrap_or_else(|| panic!("no entry point {entry}"));
        let wg = ep.workgroup_size;
        let total = (wg[0] * wg[1] * wg[2]) as i64;
        let args = ep
            .function
            .arguments
            .iter()
            .map(|a| match a.binding {
                Some(naga::Binding::BuiltIn(naga::BuiltIn::LocalInvocationIndex)) => {
                    V::I(0, total - 1)
                }
                Some(naga::Binding::BuiltIn(naga::BuiltIn::LocalInvocationId)) => {
                    V::C(wg.iter().map(|&n| V::I(0, n as i64 - 1)).collect())
                }
                _ => V::Top,
            })
            .collect();
        let fi = self.info.get_entry_point(i);
        self.run(&ep.function, fi, entry.to_string(), args);
    }

    fn run(
        &mut self,
        f: &'a Function,
        fi: &'a naga::valid::FunctionInfo,
        name: String,
        args: Vec<V>,
    ) -> V {
        self.depth += 1;
        assert!(self.depth < 64, "call depth");
        let mut fx = Fx {
            f,
            fi,
            name,
            args,
            cache: HashMap::new(),
            load_of: HashMap::new(),
            ret: None,
            frames: Vec::new(),
        };
        let mut st = State::default();
        for (h, lv) in f.local_variables.iter() {
            let v = match lv.init {
                Some(e) => self.eval(&fx, &st, e),
                None => match &self.m.types[lv.ty].inner {
                    t if range_of(t).is_some() => V::I(0, 0),
                    _ => V::Top,
                },
            };
            st.locals.insert(h, v);
        }
        self.block(&mut fx, &f.body, Some(st));
        self.depth -= 1;
        fx.ret.unwrap_or(V::Top)
    }
}
