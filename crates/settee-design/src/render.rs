//! Design functions that render a response (`shows`, `updates`) or route
//! one (`rewrites`): the design
//! document loaded and checked for the function the request names, the
//! function run on the JavaScript engine, its response object handed back
//! for the HTTP layer to send.
//!
//! Invariant: a missing design document, member or function is told
//! apart here (404 `missing`, `missing json key: …`) before any
//! JavaScript runs; what the function itself throws comes back as
//! [`DesignError::Render`].

use serde_json::Value;
use settee_db::reader::{GetOptions, Reader};
use settee_js::DesignDoc;

use crate::filter::check_member;
use crate::{Design, DesignError, DESIGN_PREFIX};

impl Design {
    /// `_design/{ddoc}` with its function `member.name` (e.g.
    /// `shows.card`), ready to run.
    pub fn render_ddoc(
        &self,
        reader: &Reader,
        ddoc: &str,
        member: &str,
        name: &str,
    ) -> Result<DesignDoc, DesignError> {
        let id = format!("{DESIGN_PREFIX}{ddoc}");
        let doc = reader.get(&id, &GetOptions::default())?;
        let mut body = doc.body.to_map();
        check_member(&body, &[member, name])?;
        body.insert("_id".into(), Value::String(doc.id.clone()));
        body.insert("_rev".into(), Value::String(doc.rev.to_string()));
        DesignDoc::new(&Value::Object(body)).map_err(DesignError::Render)
    }

    /// Runs `shows.NAME(doc, req)`: the response object (`{code, headers,
    /// body | json | base64}`). `doc` is the document's JSON text, `null`
    /// for none.
    pub async fn show(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        doc: String,
        req: &Value,
    ) -> Result<Value, DesignError> {
        self.js
            .show_async(ddoc, name, doc, req)
            .await
            .map_err(DesignError::Render)
    }

    /// Runs `updates.NAME(doc, req)`: the document to save (JSON `null`
    /// or anything but an object: nothing is saved) and the response.
    pub async fn update(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        doc: String,
        req: &Value,
    ) -> Result<(Value, Value), DesignError> {
        self.js
            .update_async(ddoc, name, doc, req)
            .await
            .map_err(DesignError::Render)
    }

    /// `_design/{ddoc}` for its `rewrites` (an array of rules or a
    /// function's source): the design document's JSON and, for the
    /// function form, the document ready to run.
    pub fn rewrite_ddoc(
        &self,
        reader: &Reader,
        ddoc: &str,
    ) -> Result<(serde_json::Map<String, Value>, DesignDoc), DesignError> {
        let id = format!("{DESIGN_PREFIX}{ddoc}");
        let doc = reader.get(&id, &GetOptions::default())?;
        let mut body = doc.body.to_map();
        body.insert("_id".into(), Value::String(doc.id.clone()));
        body.insert("_rev".into(), Value::String(doc.rev.to_string()));
        let compiled = DesignDoc::new(&Value::Object(body.clone())).map_err(DesignError::Render)?;
        Ok((body, compiled))
    }

    /// Runs the `rewrites` function on `req`.
    pub async fn rewrite(&self, ddoc: &DesignDoc, req: &Value) -> Result<Value, DesignError> {
        self.js
            .rewrite_async(ddoc, req)
            .await
            .map_err(DesignError::Render)
    }

    /// Runs `lists.NAME(head, req)`, streamed through `io` (see
    /// `JsEngine::list_async`).
    pub fn list(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        head: String,
        req: &Value,
        io: settee_js::ListIo,
    ) -> impl std::future::Future<Output = Result<Value, DesignError>> + Send + 'static {
        let call = self.js.list_async(ddoc, name, head, req, io);
        async move { call.await.map_err(DesignError::Render) }
    }
}
