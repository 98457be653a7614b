//! Expressions: the interval of an expression handle on a path ([`Analyzer::eval`]: literals,
//! constants, composites, accesses into values, arguments, cached loads and call results,
//! selects, unary and binary operations, min / max / clamp / bit counts, casts), refined by
//! what the path's conditions established (`State::refine`).

use super::interval::{binary, fit, join, lit, range_of, V};
use super::{Analyzer, Fx, State};
use naga::{Expression as E, Handle, MathFunction, Module, ScalarKind, TypeInner};

impl<'a> Analyzer<'a> {
    pub(super) fn ty(&self, fx: &Fx<'a>, h: Handle<naga::Expression>) -> &'a TypeInner {
        let fi: &'a naga::valid::FunctionInfo = fx.fi;
        let m: &'a Module = self.m;
        fi[h].ty.inner_with(&m.types)
    }

    /// An integer interval for `h` (the type's range where unknown); None for non-integers.
    pub(super) fn int(
        &self,
        fx: &Fx,
        st: &State,
        h: Handle<naga::Expression>,
    ) -> Option<(i64, i64)> {
        match self.eval(fx, st, h) {
            V::I(l, hi) => Some((l, hi)),
            _ => range_of(self.ty(fx, h)),
        }
    }

    pub(super) fn eval(&self, fx: &Fx, st: &State, h: Handle<naga::Expression>) -> V {
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
}
