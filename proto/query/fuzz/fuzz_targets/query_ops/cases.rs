//! The filter, filter-on-a-value, projection, expression and pipeline cases: each builds
//! its client document, skips it if the server would refuse the command, and runs it
//! through the query crate against the stored documents. Errors are fine; only panics,
//! hangs and unbounded memory are findings.

use bson::{Bson, Document};
use query::agg::{AggContext, Pipeline};
use query::expr::{Expr, Variables};
use query::matcher::Matcher;
use query::projection::Projection;
use query::MongoResult;

use crate::exprs::Ex;
use crate::filters::{Filter, Pred};
use crate::limits::{cmd_ok, MAX_DEPTH};
use crate::print::show;
use crate::projections::Proj;
use crate::stages::Stage;
use crate::values::{doc_array, single, Cx};

/// `{find: "c", filter: {...}}`
pub fn filter(cx: &mut Cx, f: &Filter, docs: &[Document], vars: &Variables) {
    let f = cx.filter(f, MAX_DEPTH - 1);
    show("filter", &Bson::Document(f.clone()));
    if !cmd_ok(single("filter", Bson::Document(f.clone()))) {
        return;
    }
    if let Ok(m) = Matcher::new(&f) {
        let m = m.with_variables(vars.clone());
        let _ = m.is_match_all();
        for d in docs {
            let _ = m.matches_checked(d);
            let _ = m.matches_with_position(d);
        }
    }
    let _ = query::update::upsert_seed(&f);
}

/// `{$pull: {a: <cond>}}` sits in `{update, updates: [{u: {$pull: {a: <cond>}}}]}`.
pub fn filter_value(cx: &mut Cx, p: &Pred, docs: &[Document]) {
    let v = cx.pred(p, MAX_DEPTH - 4);
    show("cond", &v);
    if let Ok(m) = Matcher::new_for_value(&v) {
        for d in docs {
            for x in d.values() {
                let _ = m.matches_value(x);
            }
        }
    }
}

/// `{find: "c", projection: {...}}`
pub fn projection(cx: &mut Cx, p: &Proj, pos: Option<u8>, docs: &[Document]) {
    let p = cx.proj(p, MAX_DEPTH - 1);
    show("projection", &Bson::Document(p.clone()));
    if !cmd_ok(single("projection", Bson::Document(p.clone()))) {
        return;
    }
    if let Ok(p) = Projection::new(&p) {
        let _ = (
            p.is_inclusion(),
            p.requires_match_position(),
            p.is_identity(),
        );
        for d in docs {
            let _ = p.apply(d);
            let _ = p.apply_with_position(d, pos.map(|x| x as usize % 8));
        }
    }
}

/// `{aggregate: "c", pipeline: [{$project: {r: <expr>}}]}`
pub fn expr(cx: &mut Cx, x: &Ex, docs: &[Document], vars: &Variables) {
    let e = cx.expr(x, MAX_DEPTH - 3);
    show("expr", &e);
    if !cmd_ok(single("expr", e.clone())) {
        return;
    }
    if let Ok(e) = Expr::parse(&e) {
        for d in docs {
            let _ = e.eval(d, vars);
            let _ = e.eval_bool(d, vars);
        }
    }
}

/// `{aggregate: "c", pipeline: [...]}`
pub fn pipeline(cx: &mut Cx, stages: &[Stage], docs: Vec<Document>, vars: &Variables) {
    let stages = cx.stages(stages, MAX_DEPTH - 2);
    let arr = doc_array(&stages);
    show("pipeline", &arr);
    if !cmd_ok(single("pipeline", arr)) {
        return;
    }
    if let Ok(p) = Pipeline::parse(&stages) {
        let _ = (
            p.leading_match(),
            p.output_stage(),
            p.referenced_collections(),
        );
        let ctx = Coll(docs.clone(), vars.clone());
        let _ = p.run_with(docs, &ctx, vars);
    }
}

/// `$lookup`, `$unionWith` and `$graphLookup` see the input documents as collection "c".
struct Coll(Vec<Document>, Variables);

impl AggContext for Coll {
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>> {
        Ok(if coll == "c" {
            self.0.clone()
        } else {
            Vec::new()
        })
    }
    fn variables(&self) -> Variables {
        self.1.clone()
    }
}
