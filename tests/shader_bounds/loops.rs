//! Loops: the counted-loop shape `for (var v = ..; v < B && ..; v = v + c)` in naga's lowering
//! ([`Analyzer::counted`]), the loop analysed to a fixpoint with widening ([`Analyzer::lp`]),
//! and the proof that it ends: c a positive constant, no other store to v in the body, and B's
//! largest upper end + c - 1 fits v's type (v never wraps).

use super::interval::{lit, range_of, V};
use super::{join_state, Analyzer, Frame, Fx, State};
use naga::{BinaryOperator as B, Block, Expression as E, Function, Handle, Module, Statement as S};

impl<'a> Analyzer<'a> {
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

    pub(super) fn lp(
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
