//! What an update did to one document, as a change stream reports it. mongod logs an
//! operator update as the diff of what its modifiers touched, a pipeline update as the
//! diff of the two documents (or as a replacement when that diff is not smaller than the
//! new document), a replacement update as a replacement; the change stream turns a diff
//! into an `update` event and a replacement into a `replace` event.

use bson::Document;

use crate::MongoResult;

use super::description::{UpdateChange, UpdateDescription};
use super::diff_calc::oplog_diff;
use super::log::UpdateLog;
use super::{Kind, UpdateContext, UpdateSpec};

impl UpdateSpec {
    /// [`UpdateSpec::apply`], also telling what the update did: None when the document did
    /// not change.
    pub fn apply_described(
        &self,
        doc: &mut Document,
        ctx: &UpdateContext,
    ) -> MongoResult<Option<UpdateChange>> {
        match &self.kind {
            Kind::Modifiers(m) => {
                let log = m.apply_logged(doc, ctx, UpdateLog::on())?;
                Ok(log.map(|log| logged_change(log, doc)))
            }
            Kind::Replacement(_) => Ok(self.apply(doc, ctx)?.then_some(UpdateChange::Replace)),
            Kind::Pipeline(_) => {
                let before = doc.clone();
                Ok(self.apply(doc, ctx)?.then(|| diff_change(&before, doc)))
            }
        }
    }

    /// What the update did to `before` (the stored document), `after` being the result of
    /// [`UpdateSpec::apply`] on it, called only when that reported a change. An operator
    /// update is applied again to `before` to learn what its modifiers touched; should that
    /// not reproduce a change, the documents' difference is reported instead.
    pub fn describe(
        &self,
        before: &Document,
        after: &Document,
        ctx: &UpdateContext,
    ) -> UpdateChange {
        match &self.kind {
            Kind::Replacement(_) => UpdateChange::Replace,
            Kind::Pipeline(_) => diff_change(before, after),
            Kind::Modifiers(m) => {
                let mut doc = before.clone();
                match m.apply_logged(&mut doc, ctx, UpdateLog::on()) {
                    Ok(Some(log)) => logged_change(log, &doc),
                    _ => diff_change(before, after),
                }
            }
        }
    }
}

/// An operator update's change: the description of its log (mongod never logs one as a
/// replacement).
fn logged_change(log: UpdateLog, after: &Document) -> UpdateChange {
    UpdateChange::Update(UpdateDescription::from_diff(&log.into_diff(after)))
}

/// A pipeline update's change: the description of the documents' diff, or a replacement.
fn diff_change(before: &Document, after: &Document) -> UpdateChange {
    match oplog_diff(before, after) {
        Some(diff) => UpdateChange::Update(UpdateDescription::from_diff(&diff)),
        None => UpdateChange::Replace,
    }
}
