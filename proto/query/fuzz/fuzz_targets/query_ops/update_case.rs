//! The update case: an update statement (operators, replacement or pipeline, optional
//! array filters) parsed and applied to each stored document, and its upsert document.

use bson::{Bson, DateTime, Document};
use query::expr::Variables;
use query::update::{UpdateContext, UpdateSpec};

use crate::limits::{cmd_ok, MAX_DEPTH};
use crate::print::show;
use crate::updates::UpdateCase;
use crate::values::{doc_array, single, Cx};

/// `{update: "c", updates: [{q: {...}, u: ..., arrayFilters: [...]}]}`
pub fn update(cx: &mut Cx, uc: &UpdateCase, now: DateTime, docs: &[Document], vars: &Variables) {
    let u = cx.update(&uc.update, MAX_DEPTH - 3);
    let q = cx.filter(&uc.upsert_filter, MAX_DEPTH - 3);
    let afs = uc.array_filters.as_ref().map(|afs| {
        afs.iter()
            .map(|af| cx.array_filter(af, MAX_DEPTH - 4))
            .collect::<Vec<_>>()
    });
    show("update", &u);
    show("q", &Bson::Document(q.clone()));
    if let Some(afs) = &afs {
        show("arrayFilters", &doc_array(afs));
    }
    let stmt = statement(&q, &u, afs.as_deref());
    if !cmd_ok(single("updates", Bson::Array(vec![Bson::Document(stmt)]))) {
        return;
    }
    if let Ok(spec) = UpdateSpec::parse(&u, afs.as_deref()) {
        let spec = spec.with_variables(vars.clone());
        let _ = spec.is_replacement();
        let _ = spec.is_pipeline();
        apply_to_each(&spec, uc, now, docs);
        let _ = spec.upsert_document(&q, now);
    }
}

/// One entry of `updates`: `{q, u, arrayFilters}`.
fn statement(q: &Document, u: &Bson, afs: Option<&[Document]>) -> Document {
    let mut stmt = Document::new();
    stmt.insert("q", q.clone());
    stmt.insert("u", u.clone());
    if let Some(afs) = afs {
        stmt.insert("arrayFilters", doc_array(afs));
    }
    stmt
}

fn apply_to_each(spec: &UpdateSpec, uc: &UpdateCase, now: DateTime, docs: &[Document]) {
    for d in docs {
        let mut d = d.clone();
        let mut ctx = UpdateContext::new(now);
        ctx.matched_array_index = uc.matched.map(|m| m as usize % 8);
        ctx.is_upsert_insert = uc.upsert_insert;
        if spec.apply(&mut d, &ctx).is_ok() {
            // The shard stores the result only if it passes its checks.
            let _ = query::check_document_depth(&d);
        }
    }
}
