//! Statements: the walk over a function's blocks ([`Analyzer::block`]), flow-sensitive over its
//! local variables: emits (loads cached, indices and cooperative loads checked), `if`s (one
//! branch where the condition is constant, else both refined and joined), switches, loops
//! (loops.rs), breaks and continues into their frames, returns, stores, calls (analysed with
//! their arguments' intervals) and cooperative stores.

use super::interval::{join, set_path, V};
use super::{join_state, Analyzer, Frame, Fx, State};
use naga::{Block, Expression as E, Handle, Module, Statement as S, TypeInner};

impl<'a> Analyzer<'a> {
    pub(super) fn block(
        &mut self,
        fx: &mut Fx<'a>,
        b: &'a Block,
        st: Option<State>,
    ) -> Option<State> {
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
}
