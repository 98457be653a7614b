//! Refinement on conditions: the state on the path where a condition is true or false
//! ([`Analyzer::refine`]: comparisons of integers narrow both sides, through `!`, `&&` and `||`;
//! a comparison that cannot hold drops the path), and a narrowed load of an unchanged local
//! narrows the local itself.

use super::interval::V;
use super::{Analyzer, Fx, State};
use naga::{BinaryOperator as B, Expression as E, Handle};

impl Analyzer<'_> {
    /// `st` on the path where `cond` is `truth`.
    pub(super) fn refine(
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
}
