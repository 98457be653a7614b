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

use naga::{
    ArraySize, BinaryOperator as B, Block, Expression as E, Function, Handle, Literal,
    MathFunction, Module, ScalarKind, Statement as S, TypeInner,
};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub enum V {
    I(i64, i64),
    C(Vec<V>),
    Top,
}

fn join(a: &V, b: &V) -> V {
    match (a, b) {
        (V::I(a0, a1), V::I(b0, b1)) => V::I((*a0).min(*b0), (*a1).max(*b1)),
        (V::C(x), V::C(y)) if x.len() == y.len() => {
            V::C(x.iter().zip(y).map(|(p, q)| join(p, q)).collect())
        }
        _ => V::Top,
    }
}

/// The range of an integer (or bool) scalar type.
fn range_of(t: &TypeInner) -> Option<(i64, i64)> {
    let s = match t {
        TypeInner::Scalar(s) => s,
        TypeInner::Atomic(s) => s,
        _ => return None,
    };
    match (s.kind, s.width) {
        (ScalarKind::Uint, 4) => Some((0, u32::MAX as i64)),
        (ScalarKind::Sint, 4) => Some((i32::MIN as i64, i32::MAX as i64)),
        (ScalarKind::Bool, _) => Some((0, 1)),
        _ => None,
    }
}

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

    fn ty(&self, fx: &Fx<'a>, h: Handle<naga::Expression>) -> &'a TypeInner {
        let fi: &'a naga::valid::FunctionInfo = fx.fi;
        let m: &'a Module = self.m;
        fi[h].ty.inner_with(&m.types)
    }

    /// An integer interval for `h` (the type's range where unknown); None for non-integers.
    fn int(&self, fx: &Fx, st: &State, h: Handle<naga::Expression>) -> Option<(i64, i64)> {
        match self.eval(fx, st, h) {
            V::I(l, hi) => Some((l, hi)),
            _ => range_of(self.ty(fx, h)),
        }
    }

    fn eval(&self, fx: &Fx, st: &State, h: Handle<naga::Expression>) -> V {
        let v = self.eval_raw(fx, st, h);
        match (st.refine.get(&h), &v) {
            (Some(&(l, hi)), V::I(a, b)) => V::I((*a).max(l), (*b).min(hi)),
            (Some(&(l, hi)), V::Top) => V::I(l, hi),
            _ => v,
        }
    }

    fn global(&self, h: Handle<naga::Expression>) -> V {
        match &self.m.global_expressions[h] {
            E::Literal(l) => lit(l),
            E::Constant(c) => self.global(self.m.constants[*c].init),
            E::Compose { components, .. } => {
                V::C(components.iter().map(|c| self.global(*c)).collect())
            }
            E::ZeroValue(t) => match range_of(&self.m.types[*t].inner) {
                Some(_) => V::I(0, 0),
                None => V::Top,
            },
            _ => V::Top,
        }
    }

    fn eval_raw(&self, fx: &Fx, st: &State, h: Handle<naga::Expression>) -> V {
        let ex = &fx.f.expressions[h];
        let rt = self.ty(fx, h);
        match ex {
            E::Literal(l) => lit(l),
            E::Constant(c) => self.global(self.m.constants[*c].init),
            E::ZeroValue(_) => match range_of(rt) {
                Some(_) => V::I(0, 0),
                None => V::Top,
            },
            E::Compose { components, .. } => {
                // Vectors built from vectors are flattened only when every part is a scalar.
                if matches!(rt, TypeInner::Vector { .. })
                    && components
                        .iter()
                        .any(|c| matches!(self.ty(fx, *c), TypeInner::Vector { .. }))
                {
                    return V::Top;
                }
                V::C(components.iter().map(|c| self.eval(fx, st, *c)).collect())
            }
            E::Splat { size, value } => V::C(vec![self.eval(fx, st, *value); *size as usize]),
            E::AccessIndex { base, index } => {
                if matches!(
                    self.ty(fx, *base),
                    TypeInner::Pointer { .. } | TypeInner::ValuePointer { .. }
                ) {
                    return V::Top; // a pointer; loads resolve their own paths
                }
                match self.eval(fx, st, *base) {
                    V::C(v) => v.get(*index as usize).cloned().unwrap_or(V::Top),
                    _ => V::Top,
                }
            }
            E::Access { base, index } => {
                if matches!(
                    self.ty(fx, *base),
                    TypeInner::Pointer { .. } | TypeInner::ValuePointer { .. }
                ) {
                    return V::Top;
                }
                match (self.eval(fx, st, *base), self.eval(fx, st, *index)) {
                    (V::C(v), V::I(a, b)) if a == b => v.get(a as usize).cloned().unwrap_or(V::Top),
                    (V::C(v), _) if !v.is_empty() => {
                        v.iter().skip(1).fold(v[0].clone(), |acc, x| join(&acc, x))
                    }
                    _ => V::Top,
                }
            }
            E::FunctionArgument(i) => fx.args[*i as usize].clone(),
            E::Load { .. } | E::CallResult(_) => fx.cache.get(&h).cloned().unwrap_or(V::Top),
            E::Select {
                condition,
                accept,
                reject,
            } => match self.eval(fx, st, *condition) {
                V::I(1, 1) => self.eval(fx, st, *accept),
                V::I(0, 0) => self.eval(fx, st, *reject),
                _ => join(&self.eval(fx, st, *accept), &self.eval(fx, st, *reject)),
            },
            E::Unary { op, expr } => match (op, self.eval(fx, st, *expr)) {
                (naga::UnaryOperator::LogicalNot, V::I(a, b)) => V::I(1 - b, 1 - a),
                (naga::UnaryOperator::Negate, V::I(a, b)) => fit(rt, -(b as i128), -(a as i128)),
                _ => V::Top,
            },
            E::Binary { op, left, right } => {
                let l = self.eval(fx, st, *left);
                let r = self.eval(fx, st, *right);
                let lt = self.ty(fx, *left);
                let rtt = self.ty(fx, *right);
                binary(*op, &l, &r, lt, rtt, rt)
            }
            E::Math {
                fun,
                arg,
                arg1,
                arg2,
                ..
            } => {
                let a = self.eval(fx, st, *arg);
                let b = arg1.map(|x| self.eval(fx, st, x));
                let c = arg2.map(|x| self.eval(fx, st, x));
                match (fun, a, b, c) {
                    (MathFunction::Min, V::I(a0, a1), Some(V::I(b0, b1)), _) => {
                        V::I(a0.min(b0), a1.min(b1))
                    }
                    (MathFunction::Max, V::I(a0, a1), Some(V::I(b0, b1)), _) => {
                        V::I(a0.max(b0), a1.max(b1))
                    }
                    (MathFunction::Min, V::Top, Some(V::I(_, b1)), _)
                    | (MathFunction::Min, V::I(_, b1), Some(V::Top), _) => match range_of(rt) {
                        Some((lo, _)) => V::I(lo, b1),
                        None => V::Top,
                    },
                    (MathFunction::Clamp, x, Some(V::I(l0, _)), Some(V::I(_, h1))) => {
                        let (a0, a1) = match x {
                            V::I(a0, a1) => (a0, a1),
                            _ => match range_of(rt) {
                                Some(r) => r,
                                None => return V::Top,
                            },
                        };
                        V::I(a0.max(l0).min(h1), a1.min(h1).max(l0))
                    }
                    (
                        MathFunction::CountLeadingZeros | MathFunction::CountTrailingZeros,
                        _,
                        _,
                        _,
                    ) if range_of(rt).is_some() => V::I(0, 32),
                    _ => V::Top,
                }
            }
            E::As {
                expr,
                kind,
                convert,
            } => {
                let src = self.ty(fx, *expr);
                let v = self.eval(fx, st, *expr);
                let int_src = range_of(src).is_some()
                    && !matches!(src, TypeInner::Scalar(s) if s.kind == ScalarKind::Bool);
                match (v, kind) {
                    (V::I(a, b), ScalarKind::Uint | ScalarKind::Sint)
                        if int_src || convert.is_some() && range_of(src).is_some() =>
                    {
                        // Same value in both types when it fits both (u32 <-> i32 bit casts
                        // and conversions alike).
                        match range_of(rt) {
                            Some((lo, hi)) if a >= lo && b <= hi => V::I(a, b),
                            _ => V::Top,
                        }
                    }
                    _ => V::Top,
                }
            }
            _ => V::Top,
        }
    }

    fn violation(&mut self, fx: &Fx, what: String) {
        let s = format!("{}: {what}", fx.name);
        if !self.report.violations.contains(&s) {
            self.report.violations.push(s);
        }
    }

    /// The fixed length of the array / vector that `base` (a pointer or a value) indexes, and
    /// whether it lives in workgroup memory; None for runtime-sized arrays (storage).
    fn indexed_len(&self, fx: &Fx, base: Handle<naga::Expression>) -> Option<(i64, bool)> {
        let t = self.ty(fx, base);
        let (inner, wg) = match t {
            TypeInner::Pointer { base, space } => (
                &self.m.types[*base].inner,
                *space == naga::AddressSpace::WorkGroup,
            ),
            TypeInner::ValuePointer {
                size: Some(s),
                space,
                ..
            } => return Some((*s as i64, *space == naga::AddressSpace::WorkGroup)),
            other => (other, false),
        };
        match inner {
            TypeInner::Array {
                size: ArraySize::Constant(n),
                ..
            } => Some((n.get() as i64, wg)),
            TypeInner::Vector { size, .. } => Some((*size as i64, wg)),
            TypeInner::Matrix { columns, .. } => Some((*columns as i64, wg)),
            _ => None,
        }
    }

    fn check_index(&mut self, fx: &Fx, st: &State, h: Handle<naga::Expression>) {
        let E::Access { base, index } = fx.f.expressions[h] else {
            return;
        };
        let Some((len, wg)) = self.indexed_len(fx, base) else {
            return;
        };
        match self.int(fx, st, index) {
            Some((lo, hi)) if lo >= 0 && hi < len => {
                self.report.indices.insert((fx.name.clone(), h, wg));
            }
            r => self.violation(
                fx,
                format!("index {index:?} of {h:?} in {r:?}, length {len}"),
            ),
        }
    }

    /// A cooperative load / store through `pointer` (&array[i]) with `stride`: every element
    /// of the 16x16 (or 8x8) extent, i + (n - 1) * stride + (n - 1), lies in the array.
    fn check_coop(
        &mut self,
        fx: &Fx,
        st: &State,
        pointer: Handle<naga::Expression>,
        stride: Handle<naga::Expression>,
        n: i64,
    ) {
        let (base, idx) = match fx.f.expressions[pointer] {
            E::Access { base, index } => (base, self.int(fx, st, index)),
            E::AccessIndex { base, index } => (base, Some((index as i64, index as i64))),
            _ => {
                self.violation(
                    fx,
                    format!("cooperative access through {pointer:?}: not &array[i]"),
                );
                return;
            }
        };
        let Some((len, true)) = self.indexed_len(fx, base) else {
            // Storage rows (kernel k64p's A): robust buffer access, not checked here.
            return;
        };
        match (idx, self.int(fx, st, stride)) {
            (Some((lo, hi)), Some((_, s))) if lo >= 0 && hi + (n - 1) * s + (n - 1) < len => {
                self.report.coop_extents.insert((fx.name.clone(), pointer));
            }
            (i, s) => self.violation(
                fx,
                format!("cooperative access at {i:?} stride {s:?} (n {n}), length {len}"),
            ),
        }
    }

    fn block(&mut self, fx: &mut Fx<'a>, b: &'a Block, st: Option<State>) -> Option<State> {
        let mut st = st;
        let stmts: Vec<&S> = b.iter().collect();
        for (k, s) in stmts.iter().enumerate() {
            let cur = st.take()?;
            st = self.stmt(fx, s, cur, k, &stmts);
        }
        st
    }

    fn stmt(
        &mut self,
        fx: &mut Fx<'a>,
        s: &'a S,
        mut st: State,
        _k: usize,
        _all: &[&S],
    ) -> Option<State> {
        match s {
            S::Emit(r) => {
                for h in r.clone() {
                    // A new value: what was known of the handle's previous value is gone.
                    st.refine.remove(&h);
                    match &fx.f.expressions[h] {
                        E::Load { pointer } => {
                            let v = self.load(fx, &st, *pointer);
                            if let E::LocalVariable(lv) = fx.f.expressions[*pointer] {
                                let g = st.gen.get(&lv).copied().unwrap_or(0);
                                fx.load_of.insert(h, (lv, g));
                            }
                            fx.cache.insert(h, v);
                        }
                        E::Access { .. } => self.check_index(fx, &st, h),
                        E::CooperativeLoad {
                            columns,
                            rows,
                            data,
                            ..
                        } => {
                            let n = (*columns as i64).max(*rows as i64);
                            self.check_coop(fx, &st, data.pointer, data.stride, n);
                        }
                        _ => {}
                    }
                }
                Some(st)
            }
            S::Block(b) => self.block(fx, b, Some(st)),
            S::If {
                condition,
                accept,
                reject,
            } => {
                let guard = fx.frames.last().and_then(|f| f.guard);
                if let Some((c, bnd)) = guard {
                    if c == *condition {
                        let hi = self.int(fx, &st, bnd).map(|r| r.1);
                        let fr = fx.frames.last_mut().unwrap();
                        fr.bound_hi = match (fr.bound_hi, hi) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (_, None) => Some(i64::MAX),
                            (None, b) => b,
                        };
                    }
                }
                match self.eval(fx, &st, *condition) {
                    V::I(1, 1) => self.block(fx, accept, Some(st)),
                    V::I(0, 0) => self.block(fx, reject, Some(st)),
                    _ => {
                        let a = self.refine(fx, st.clone(), *condition, true);
                        let r = self.refine(fx, st, *condition, false);
                        let a = self.block(fx, accept, a);
                        let r = self.block(fx, reject, r);
                        join_state(a, r)
                    }
                }
            }
            S::Switch { selector, cases } => {
                let sel = self.eval(fx, &st, *selector);
                fx.frames.push(Frame {
                    is_loop: false,
                    breaks: None,
                    continues: None,
                    guard: None,
                    bound_hi: None,
                });
                let mut out = None;
                let mut carry: Option<State> = None;
                for c in cases {
                    let hit = match (c.value, &sel) {
                        (naga::SwitchValue::Default, _) => true,
                        (naga::SwitchValue::U32(v), V::I(a, b)) => (*a..=*b).contains(&(v as i64)),
                        (naga::SwitchValue::I32(v), V::I(a, b)) => (*a..=*b).contains(&(v as i64)),
                        _ => true,
                    };
                    let entry = if hit {
                        join_state(Some(st.clone()), carry.take())
                    } else {
                        carry.take()
                    };
                    let o = self.block(fx, &c.body, entry);
                    if c.fall_through {
                        carry = o;
                    } else {
                        out = join_state(out, o);
                    }
                }
                let fr = fx.frames.pop().unwrap();
                let out = join_state(out, carry);
                join_state(out, fr.breaks)
            }
            S::Loop {
                body,
                continuing,
                break_if,
            } => self.lp(fx, body, continuing, *break_if, st),
            S::Break => {
                let fr = fx.frames.last_mut().expect("break outside a loop");
                fr.breaks = join_state(fr.breaks.take(), Some(st));
                None
            }
            S::Continue => {
                let fr = fx
                    .frames
                    .iter_mut()
                    .rev()
                    .find(|f| f.is_loop)
                    .expect("continue outside a loop");
                fr.continues = join_state(fr.continues.take(), Some(st));
                None
            }
            S::Return { value } => {
                let v = match value {
                    Some(h) => self.eval(fx, &st, *h),
                    None => V::Top,
                };
                fx.ret = Some(match fx.ret.take() {
                    Some(r) => join(&r, &v),
                    None => v,
                });
                None
            }
            S::Kill => None,
            S::Store { pointer, value } => {
                let v = self.eval(fx, &st, *value);
                self.store(fx, &mut st, *pointer, v);
                Some(st)
            }
            S::Call {
                function,
                arguments,
                result,
            } => {
                let args: Vec<V> = arguments.iter().map(|a| self.eval(fx, &st, *a)).collect();
                let m: &'a Module = self.m;
                let info: &'a naga::valid::ModuleInfo = self.info;
                let f = &m.functions[*function];
                let name = f.name.clone().unwrap_or_default();
                let r = self.run(f, &info[*function], name, args);
                if let Some(res) = result {
                    fx.cache.insert(*res, r);
                }
                Some(st)
            }
            S::CooperativeStore { data, target } => {
                let n = match self.ty(fx, *target) {
                    TypeInner::CooperativeMatrix { columns, rows, .. } => {
                        (*columns as i64).max(*rows as i64)
                    }
                    _ => 16,
                };
                self.check_coop(fx, &st, data.pointer, data.stride, n);
                Some(st)
            }
            _ => Some(st),
        }
    }

    /// The local variable and constant path a pointer expression names (None: not a local, or
    /// a dynamic index on the way).
    fn local_path(
        &self,
        fx: &Fx,
        p: Handle<naga::Expression>,
    ) -> Option<(Handle<naga::LocalVariable>, Vec<u32>)> {
        match fx.f.expressions[p] {
            E::LocalVariable(lv) => Some((lv, Vec::new())),
            E::AccessIndex { base, index } => {
                let (lv, mut path) = self.local_path(fx, base)?;
                path.push(index);
                Some((lv, path))
            }
            _ => None,
        }
    }

    fn load(&self, fx: &Fx, st: &State, p: Handle<naga::Expression>) -> V {
        let Some((lv, path)) = self.local_path(fx, p) else {
            return V::Top;
        };
        let mut v = st.locals.get(&lv).cloned().unwrap_or(V::Top);
        for i in path {
            v = match v {
                V::C(c) => c.get(i as usize).cloned().unwrap_or(V::Top),
                _ => V::Top,
            };
        }
        v
    }

    fn store(&self, fx: &Fx, st: &mut State, p: Handle<naga::Expression>, v: V) {
        // The root local of any pointer into a local (a dynamic index: the whole local unknown).
        let mut q = p;
        let root = loop {
            match fx.f.expressions[q] {
                E::LocalVariable(lv) => break Some(lv),
                E::AccessIndex { base, .. } | E::Access { base, .. } => q = base,
                _ => break None,
            }
        };
        let Some(root) = root else {
            return;
        };
        *st.gen.entry(root).or_insert(0) += 1;
        match self.local_path(fx, p) {
            Some((lv, path)) => {
                let slot = st.locals.entry(lv).or_insert(V::Top);
                set_path(slot, &path, v);
            }
            None => {
                st.locals.insert(root, V::Top);
            }
        }
    }

    /// `st` on the path where `cond` is `truth`.
    fn refine(
        &self,
        fx: &Fx,
        mut st: State,
        cond: Handle<naga::Expression>,
        truth: bool,
    ) -> Option<State> {
        match fx.f.expressions[cond] {
            E::Unary {
                op: naga::UnaryOperator::LogicalNot,
                expr,
            } => return self.refine(fx, st, expr, !truth),
            E::Binary {
                op: B::LogicalAnd | B::And,
                left,
                right,
            } if truth => {
                let st = self.refine(fx, st, left, true)?;
                return self.refine(fx, st, right, true);
            }
            E::Binary {
                op: B::LogicalOr | B::InclusiveOr,
                left,
                right,
            } if !truth => {
                let st = self.refine(fx, st, left, false)?;
                return self.refine(fx, st, right, false);
            }
            E::Binary { op, left, right } => {
                let op = match (op, truth) {
                    (o, true) => o,
                    (B::Less, false) => B::GreaterEqual,
                    (B::LessEqual, false) => B::Greater,
                    (B::Greater, false) => B::LessEqual,
                    (B::GreaterEqual, false) => B::Less,
                    (B::Equal, false) => B::NotEqual,
                    (B::NotEqual, false) => B::Equal,
                    _ => return Some(st),
                };
                let (Some(l), Some(r)) = (self.int(fx, &st, left), self.int(fx, &st, right)) else {
                    return Some(st);
                };
                // New bounds for left and right.
                let (nl, nr) = match op {
                    B::Less => ((l.0, l.1.min(r.1 - 1)), (r.0.max(l.0 + 1), r.1)),
                    B::LessEqual => ((l.0, l.1.min(r.1)), (r.0.max(l.0), r.1)),
                    B::Greater => ((l.0.max(r.0 + 1), l.1), (r.0, r.1.min(l.1 - 1))),
                    B::GreaterEqual => ((l.0.max(r.0), l.1), (r.0, r.1.min(l.1))),
                    B::Equal => {
                        let m = (l.0.max(r.0), l.1.min(r.1));
                        (m, m)
                    }
                    _ => return Some(st),
                };
                if nl.0 > nl.1 || nr.0 > nr.1 {
                    return None; // this path cannot happen
                }
                self.narrow(fx, &mut st, left, nl);
                self.narrow(fx, &mut st, right, nr);
            }
            _ => {}
        }
        Some(st)
    }

    fn narrow(&self, fx: &Fx, st: &mut State, h: Handle<naga::Expression>, r: (i64, i64)) {
        if matches!(fx.f.expressions[h], E::Literal(_) | E::Constant(_)) {
            return;
        }
        st.refine.insert(h, r);
        // A load of a local unchanged since: the local itself.
        if let Some(&(lv, g)) = fx.load_of.get(&h) {
            if st.gen.get(&lv).copied().unwrap_or(0) == g {
                if let Some(V::I(a, b)) = st.locals.get(&lv) {
                    let n = V::I((*a).max(r.0), (*b).min(r.1));
                    st.locals.insert(lv, n);
                } else if let Some(V::Top) = st.locals.get(&lv) {
                    st.locals.insert(lv, V::I(r.0, r.1));
                }
            }
        }
    }

    /// The counted-loop shape: (guard condition, counter, bound, step).
    fn counted(&self, fx: &Fx, body: &Block, continuing: &Block) -> Option<Counted> {
        let first = body.iter().find(|s| !matches!(s, S::Emit(_)))?;
        let S::If {
            condition,
            accept,
            reject,
        } = first
        else {
            return None;
        };
        if !accept.is_empty() || !matches!(reject.iter().next(), Some(S::Break)) {
            return None;
        }
        // A conjunct `load(v) < bound`.
        let mut todo = vec![*condition];
        let mut found = None;
        while let Some(c) = todo.pop() {
            match fx.f.expressions[c] {
                E::Binary {
                    op: B::LogicalAnd | B::And,
                    left,
                    right,
                } => {
                    todo.push(left);
                    todo.push(right);
                }
                E::Binary {
                    op: B::Less,
                    left,
                    right,
                } => {
                    if let E::Load { pointer } = fx.f.expressions[left] {
                        if let E::LocalVariable(v) = fx.f.expressions[pointer] {
                            found = Some((v, right));
                        }
                    }
                }
                _ => {}
            }
        }
        let (v, bound) = found?;
        // continuing: v = v + c, c a positive constant; the body never stores v.
        let mut step = None;
        for s in continuing.iter() {
            if let S::Store { pointer, value } = s {
                if fx.f.expressions[*pointer] == E::LocalVariable(v) {
                    if let E::Binary {
                        op: B::Add,
                        left,
                        right,
                    } = fx.f.expressions[*value]
                    {
                        let is_v = |h: Handle<naga::Expression>| {
                            matches!(fx.f.expressions[h], E::Load { pointer }
                                if fx.f.expressions[pointer] == E::LocalVariable(v))
                        };
                        let c = |h: Handle<naga::Expression>| match &fx.f.expressions[h] {
                            E::Literal(l) => match lit(l) {
                                V::I(a, b) if a == b && a > 0 => Some(a),
                                _ => None,
                            },
                            _ => None,
                        };
                        step = match (is_v(left), is_v(right)) {
                            (true, _) => c(right),
                            (_, true) => c(left),
                            _ => None,
                        };
                    }
                    step?;
                }
            }
        }
        if stores_local(fx, body, v) {
            return None;
        }
        Some((*condition, v, bound, step?))
    }

    fn lp(
        &mut self,
        fx: &mut Fx<'a>,
        body: &'a Block,
        continuing: &'a Block,
        break_if: Option<Handle<naga::Expression>>,
        st: State,
    ) -> Option<State> {
        let shape = self.counted(fx, body, continuing);
        let mut head = st;
        let mut iter = 0;
        let (breaks, bound_hi) = loop {
            fx.frames.push(Frame {
                is_loop: true,
                breaks: None,
                continues: None,
                guard: shape.map(|(c, _, b, _)| (c, b)),
                bound_hi: None,
            });
            let out = self.block(fx, body, Some(head.clone()));
            let cont_in = {
                let fr = fx.frames.last_mut().unwrap();
                join_state(out, fr.continues.take())
            };
            let cont_out = self.block(fx, continuing, cont_in);
            let fr = fx.frames.pop().unwrap();
            let mut breaks = fr.breaks;
            let back = match (break_if, cont_out) {
                (Some(c), Some(s)) => {
                    breaks = join_state(breaks, self.refine(fx, s.clone(), c, true));
                    self.refine(fx, s, c, false)
                }
                (_, s) => s,
            };
            let mut next = join_state(Some(head.clone()), back).unwrap();
            if iter >= 3 {
                widen(self.m, fx.f, &head, &mut next);
            }
            if next.locals == head.locals || iter > 40 {
                break (breaks, fr.bound_hi);
            }
            head = next;
            iter += 1;
        };
        match shape {
            Some((_, v, _, step)) => {
                let max = range_of(&self.m.types[fx.f.local_variables[v].ty].inner)
                    .map(|r| r.1)
                    .unwrap_or(0);
                match bound_hi {
                    Some(b) if b != i64::MAX && b - 1 + step <= max => {
                        self.report.loops.insert((fx.name.clone(), v));
                    }
                    b => self.violation(
                        fx,
                        format!(
                            "loop over {:?}: bound up to {b:?}, step {step}: may wrap",
                            fx.f.local_variables[v].name
                        ),
                    ),
                }
            }
            None => self.violation(fx, "a loop that is not a counted loop".into()),
        }
        breaks
    }
}

/// A counted loop: (guard condition, counter, bound, step).
type Counted = (
    Handle<naga::Expression>,
    Handle<naga::LocalVariable>,
    Handle<naga::Expression>,
    i64,
);

fn stores_local(fx: &Fx, b: &Block, v: Handle<naga::LocalVariable>) -> bool {
    b.iter().any(|s| match s {
        S::Store { pointer, .. } => {
            let mut q = *pointer;
            loop {
                match fx.f.expressions[q] {
                    E::LocalVariable(l) => return l == v,
                    E::AccessIndex { base, .. } | E::Access { base, .. } => q = base,
                    _ => return false,
                }
            }
        }
        S::Block(b) => stores_local(fx, b, v),
        S::If { accept, reject, .. } => stores_local(fx, accept, v) || stores_local(fx, reject, v),
        S::Switch { cases, .. } => cases.iter().any(|c| stores_local(fx, &c.body, v)),
        S::Loop {
            body, continuing, ..
        } => stores_local(fx, body, v) || stores_local(fx, continuing, v),
        _ => false,
    })
}

fn widen(m: &Module, f: &Function, old: &State, new: &mut State) {
    for (k, v) in new.locals.iter_mut() {
        let Some(o) = old.locals.get(k) else { continue };
        if o == v {
            continue;
        }
        let r = range_of(&m.types[f.local_variables[*k].ty].inner);
        *v = match (o, &*v, r) {
            (V::I(a, b), V::I(c, d), Some((lo, hi))) => {
                V::I(if c < a { lo } else { *c }, if d > b { hi } else { *d })
            }
            _ => V::Top,
        };
    }
}

fn set_path(slot: &mut V, path: &[u32], v: V) {
    if path.is_empty() {
        *slot = v;
        return;
    }
    match slot {
        V::C(c) if (path[0] as usize) < c.len() => {
            set_path(&mut c[path[0] as usize], &path[1..], v)
        }
        _ => {} // an unknown composite stays unknown
    }
}

fn lit(l: &Literal) -> V {
    match *l {
        Literal::U32(v) => V::I(v as i64, v as i64),
        Literal::I32(v) => V::I(v as i64, v as i64),
        Literal::AbstractInt(v) => V::I(v, v),
        Literal::Bool(b) => V::I(b as i64, b as i64),
        _ => V::Top,
    }
}

/// [a, b] if it fits type `t`, else unknown (the operation may wrap).
/// (Computed in i128: no operation on two 32-bit values overflows it.)
fn fit(t: &TypeInner, a: i128, b: i128) -> V {
    match range_of(t) {
        Some((lo, hi)) if a >= lo as i128 && b <= hi as i128 => V::I(a as i64, b as i64),
        _ => V::Top,
    }
}

fn scalar_of(t: &TypeInner) -> Option<TypeInner> {
    match t {
        TypeInner::Scalar(_) => Some(t.clone()),
        TypeInner::Vector { scalar, .. } => Some(TypeInner::Scalar(*scalar)),
        _ => None,
    }
}

fn w(x: i64) -> i128 {
    x as i128
}

fn binary(op: B, l: &V, r: &V, lt: &TypeInner, rt: &TypeInner, out: &TypeInner) -> V {
    let (Some(ls), Some(rs), Some(os)) = (scalar_of(lt), scalar_of(rt), scalar_of(out)) else {
        return V::Top;
    };
    // Component-wise over vectors (a scalar side broadcast).
    match (l, r) {
        (V::C(a), V::C(b)) if a.len() == b.len() => {
            return V::C(
                a.iter()
                    .zip(b)
                    .map(|(x, y)| binary(op, x, y, &ls, &rs, &os))
                    .collect(),
            )
        }
        (V::C(a), y) if !matches!(rt, TypeInner::Vector { .. }) => {
            return V::C(a.iter().map(|x| binary(op, x, y, &ls, &rs, &os)).collect())
        }
        (x, V::C(b)) if !matches!(lt, TypeInner::Vector { .. }) => {
            return V::C(b.iter().map(|y| binary(op, x, y, &ls, &rs, &os)).collect())
        }
        _ => {}
    }
    if matches!(lt, TypeInner::Vector { .. }) || matches!(rt, TypeInner::Vector { .. }) {
        return V::Top;
    }
    let li = match l {
        V::I(a, b) => (*a, *b),
        _ => match range_of(&ls) {
            Some(r) => r,
            None => return V::Top,
        },
    };
    let ri = match r {
        V::I(a, b) => (*a, *b),
        _ => match range_of(&rs) {
            Some(r) => r,
            None => return V::Top,
        },
    };
    let ((a, b), (c, d)) = (li, ri);
    let cmp = |lo: bool, hi: bool| V::I(lo as i64, hi as i64);
    match op {
        B::Add => fit(out, w(a) + w(c), w(b) + w(d)),
        B::Subtract => fit(out, w(a) - w(d), w(b) - w(c)),
        B::Multiply => {
            let p = [w(a) * w(c), w(a) * w(d), w(b) * w(c), w(b) * w(d)];
            fit(out, *p.iter().min().unwrap(), *p.iter().max().unwrap())
        }
        B::Divide if c > 0 && a >= 0 => fit(out, w(a / d), w(b / c)),
        B::Modulo if c > 0 && a >= 0 => {
            if b < c {
                V::I(a, b)
            } else {
                V::I(0, b.min(d - 1))
            }
        }
        B::And if a >= 0 && c >= 0 => {
            if a == b && c == d {
                V::I(a & c, a & c)
            } else {
                V::I(0, b.min(d))
            }
        }
        B::InclusiveOr | B::ExclusiveOr if a >= 0 && c >= 0 => {
            if a == b && c == d {
                let v = if op == B::InclusiveOr { a | c } else { a ^ c };
                V::I(v, v)
            } else {
                let m = b.max(d);
                let bits = 64 - (m as u64).leading_zeros();
                V::I(0, (1i64 << bits) - 1)
            }
        }
        B::LogicalAnd => V::I(a.min(c), b.min(d)),
        B::LogicalOr => V::I(a.max(c), b.max(d)),
        B::ShiftLeft if a >= 0 && c >= 0 && d < 32 => fit(out, w(a) << c, w(b) << d),
        B::ShiftRight if a >= 0 && c >= 0 && d < 32 => V::I(a >> d, b >> c),
        B::Less => cmp(b < c, a < d),
        B::LessEqual => cmp(b <= c, a <= d),
        B::Greater => cmp(a > d, b > c),
        B::GreaterEqual => cmp(a >= d, b >= c),
        B::Equal => cmp(a == b && c == d && a == c, !(b < c || d < a)),
        B::NotEqual => cmp(b < c || d < a, !(a == b && c == d && a == c)),
        _ => fit(out, i128::MIN, i128::MAX),
    }
}
