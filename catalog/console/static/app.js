// The catalog console: a client of the admin REST API (see /docs). Hash routes, one page at a time.

import { ApiError, blobUrls, call, follow, get, imageUrl, isPreviewableImage, session, upload } from "./api.js";
import { append, bytes, clear, field, h, qs, when } from "./dom.js";
import { lineDiff } from "./diff.js";
import { notify } from "./notices.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

let me = null; // whoami of the signed-in token
let following = { slug: null, stop: null };
let onLiveChange = null; // the current page's reaction to a change of its tenant

const enc = encodeURIComponent;
const T = (slug) => `tenants/${enc(slug)}`;

// -- errors ---------------------------------------------------------------------------------------

// The ttlMs field as sent: empty is null (the server's default), a number as typed, anything else
// as the text it is, so the API's problem names the field rather than a NaN turning into null.
function ttlValue(typed) {
  const value = typed.trim();
  if (value === "") return null;
  return Number.isFinite(Number(value)) ? Number(value) : value;
}

function problemBox(err) {
  const p = err instanceof ApiError ? err.problem : { title: "Error", detail: String(err && err.message) };
  const status = err instanceof ApiError ? err.status : "";
  return h(
    "div",
    { class: "problem", role: "alert", dataset: { status: String(status) } },
    h("strong", {}, `${status} ${p.title || "Error"}`.trim()),
    p.detail ? h("div", {}, p.detail) : null,
    (p.errors || []).length
      ? h("ul", {}, p.errors.map((e) => h("li", {}, h("code", {}, e.pointer || "/"), " ", e.detail)))
      : null,
  );
}

// A 401 means the token is no longer good: back to sign in. True when it was one.
function signedOutBy(err) {
  if (!(err instanceof ApiError && err.status === 401)) return false;
  session.signOut();
  me = null;
  location.hash = "#/signin";
  return true;
}

async function guarded(target, work) {
  try {
    return await work();
  } catch (err) {
    if (!signedOutBy(err)) append(target, [problemBox(err)]);
    return undefined;
  }
}

function twoStep(label, confirmLabel, action, cls = "danger") {
  // A destructive button asks once more in place (keyboard friendly, no modal).
  const button = h("button", { type: "button", class: "secondary" }, label);
  button.addEventListener("click", async () => {
    if (button.dataset.armed) {
      button.disabled = true;
      await action();
    } else {
      button.dataset.armed = "1";
      button.textContent = confirmLabel;
      button.className = cls;
    }
  });
  return button;
}

// -- frame ----------------------------------------------------------------------------------------

function parseRoute() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || "") };
}

function link(label, hash, attrs = {}) {
  return h("a", { href: hash, ...attrs }, label);
}

function renderNav(slug, current) {
  clear(nav);
  if (!me) return;
  const items = [];
  if (me.kind === "platform") items.push(["Tenants", "#/tenants", "tenants"]);
  if (slug) {
    const base = `#/t/${enc(slug)}`;
    items.push(
      ["Resources", `${base}/browse`, "browse"],
      ["Upload", `${base}/upload`, "upload"],
      ["Templates", `${base}/templates`, "templates"],
      ["Grants", `${base}/grants`, "grants"],
      ["Tokens", `${base}/tokens`, "tokens"],
      ["Activity", `${base}/activity`, "activity"],
    );
  }
  for (const [label, href, key] of items) {
    append(nav, [link(label, href, key === current ? { "aria-current": "page" } : {})]);
  }
}

function renderWho() {
  clear(who);
  if (!me) return;
  const label = me.kind === "platform" ? "platform admin" : `admin of ${me.tenant}`;
  append(who, [
    h("span", { id: "whoami" }, label),
    h("button", { type: "button", id: "signout", onclick: signOut }, "Sign out"),
  ]);
}

function signOut() {
  session.signOut();
  me = null;
  followTenant(null);
  renderWho();
  clear(nav);
  location.hash = "#/signin";
}

function followTenant(slug) {
  if (following.slug === slug) return;
  if (following.stop) following.stop();
  document.body.dataset.live = "off";
  following = { slug, stop: slug ? follow(slug, showChange, (on) => { document.body.dataset.live = on ? "on" : "off"; }) : null };
}

function showChange(change) {
  const text = `${change.kind} ${change.op}: ${change.uri ?? ""}`;
  notify(`#${change.seq} ${text}`, { kind: "info", dataset: { seq: String(change.seq) } });
  if (onLiveChange) onLiveChange(change);
}

function page(title, ...children) {
  clear(main);
  document.title = `${title} · catalog`;
  append(main, [h("h1", {}, title), ...children]);
  main.focus({ preventScroll: true });
}

// -- sign in --------------------------------------------------------------------------------------

function signInPage(message) {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true });
  const out = h("div");
  const form = h(
    "form",
    { class: "signin", id: "signin" },
    h("p", {}, "Sign in with an admin bearer token: the platform admin token that ", h("code", {}, "catalog serve"),
      " printed, or a tenant admin token. It is kept for this tab only."),
    field("Token", input),
    h("button", { type: "submit" }, "Sign in"),
    out,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(out);
    session.signIn(input.value.trim());
    try {
      me = await get("whoami");
    } catch (err) {
      session.signOut();
      append(out, [problemBox(err)]);
      return;
    }
    renderWho();
    location.hash = me.kind === "platform" ? "#/tenants" : `#/t/${enc(me.tenant)}/browse`;
  });
  page("Sign in", message ? h("div", { class: "notice" }, message) : null, form);
  input.focus();
}

// -- tenants --------------------------------------------------------------------------------------

async function tenantsPage() {
  page("Tenants");
  const list = h("div");
  append(main, [list]);
  if (me.kind === "platform") {
    const slug = h("input", { name: "slug", id: "new-slug", required: true, pattern: "[a-z0-9][a-z0-9-]{0,62}" });
    const name = h("input", { name: "name", id: "new-name" });
    const out = h("div");
    const form = h("form", { class: "inline", id: "create-tenant" }, field("Slug", slug), field("Name", name),
      h("button", { type: "submit" }, "Create tenant"), out);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clear(out);
      await guarded(out, async () => {
        await call("POST", "tenants", { body: { slug: slug.value, name: name.value || undefined } });
        slug.value = ""; name.value = "";
        await load();
      });
    });
    main.insertBefore(h("section", {}, h("h2", {}, "New tenant"), form), list);
  }
  async function load() {
    clear(list);
    await guarded(list, async () => {
      const { items } = await get("tenants");
      const rows = items.map((t) => {
        const actions = h("td");
        append(actions, [link("Open", `#/t/${enc(t.slug)}/browse`)]);
        if (me.kind === "platform") {
          const confirm = h("span");
          const del = h("button", { type: "button", class: "secondary", onclick: () => {
            clear(confirm);
            const typed = h("input", { "aria-label": `Type ${t.slug} to confirm`, placeholder: t.slug });
            const go = h("button", { type: "button", class: "danger", disabled: true }, `Delete ${t.slug} and all its data`);
            typed.addEventListener("input", () => { go.disabled = typed.value !== t.slug; });
            go.addEventListener("click", () => guarded(confirm, async () => {
              await call("DELETE", `tenants/${enc(t.slug)}`);
              await load();
            }));
            append(confirm, [" ", typed, " ", go]);
            typed.focus();
          } }, "Delete…");
          append(actions, [" ", del, confirm]);
        }
        return h("tr", { dataset: { slug: t.slug } }, h("td", {}, h("code", {}, t.slug)), h("td", {}, t.name), h("td", {}, when(t.createdAt)), actions);
      });
      append(list, [h("table", { id: "tenants" }, h("thead", {}, h("tr", {}, h("th", {}, "Slug"), h("th", {}, "Name"), h("th", {}, "Created"), h("th", {}, ""))), h("tbody", {}, rows))]);
    });
  }
  await load();
}

// -- resource browser -----------------------------------------------------------------------------

function crumbsOf(prefix) {
  // The folders leading to ``prefix``, as the tree API builds them.
  const out = [];
  if (!prefix) return out;
  let start = prefix.indexOf("://");
  let at = start >= 0 ? prefix.indexOf("/", start + 3) : prefix.indexOf("/");
  while (at >= 0) {
    out.push(prefix.slice(0, at + 1));
    at = prefix.indexOf("/", at + 1);
  }
  if (!out.length || out[out.length - 1] !== prefix) out.push(prefix);
  return out;
}

// What of a resource matched a search, the matched words marked: built of text nodes and <mark>,
// never from markup (the parts are curator text).
function snippetOf(snippet) {
  if (!snippet) return null;
  const label = { name: "name", title: "title", description: "description", uri: "URI", text: "text" }[snippet.field] || snippet.field;
  return h("div", { class: "snippet small", dataset: { field: snippet.field } },
    h("span", { class: "muted" }, `${label}: `),
    snippet.parts.map((part) => (part.match ? h("mark", {}, part.text) : part.text)));
}

async function browsePage(slug, params) {
  const prefix = params.get("prefix") || "";
  const q = params.get("q") || "";
  const tag = params.get("tag") || "";
  const mime = params.get("mimeType") || "";
  const go = (changes) => {
    const next = { prefix, q, tag, mimeType: mime, ...changes };
    location.hash = `#/t/${enc(slug)}/browse${qs(next)}`;
  };
  const search = h("input", { type: "search", id: "search", name: "q", value: q, placeholder: "words in name, URI or text" });
  const tagIn = h("input", { id: "filter-tag", name: "tag", value: tag, size: 12 });
  const mimeIn = h("input", { id: "filter-mime", name: "mimeType", value: mime, size: 14, placeholder: "image/*" });
  // A search covers the whole tenant unless a prefix is typed; filters alone keep the folder.
  const prefixIn = h("input", { id: "filter-prefix", name: "prefix", value: q ? prefix : "", size: 28, placeholder: prefix && !q ? "this folder" : "any" });
  const form = h("form", { class: "inline", id: "filters", role: "search" },
    field("Search", search), field("Prefix", prefixIn), field("Tag", tagIn), field("MIME type", mimeIn),
    h("button", { type: "submit" }, "Apply"),
    h("a", { class: "button", href: `#/t/${enc(slug)}/new${qs({ prefix })}` }, "New resource"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const words = search.value.trim();
    go({ q: words, tag: tagIn.value.trim(), mimeType: mimeIn.value.trim(), prefix: prefixIn.value || (words ? "" : prefix) });
  });
  const crumbs = h("nav", { class: "crumbs", "aria-label": "Folder" },
    link(slug, `#/t/${enc(slug)}/browse${qs({ tag, mimeType: mime })}`),
    crumbsOf(prefix).map((p, i, all) => [" / ", i === all.length - 1 ? h("strong", {}, p.slice(i ? all[i - 1].length : 0)) : link(p.slice(i ? all[i - 1].length : 0), `#/t/${enc(slug)}/browse${qs({ prefix: p, tag, mimeType: mime })}`)]));
  const body = h("tbody");
  const status = h("p", { class: "muted small", id: "listing-status" });
  const more = h("button", { type: "button", class: "secondary", id: "more", hidden: true }, "Load more");
  const out = h("div");
  const picked = selection(slug, async () => { clear(body); cursor = null; shown = 0; await load(); });
  resetThumbnails();
  page(q ? `Search: ${q}` : "Resources", form, q ? null : crumbs, picked.bar,
    h("table", { class: "tree", id: "listing" }, h("thead", {}, h("tr", {}, h("th", {}, picked.all, " Name"), h("th", {}, "MIME type"), h("th", {}, "Size"), h("th", {}, "Updated"))), body),
    status, more, out);
  let cursor = null;
  let shown = 0;
  async function load() {
    more.disabled = true;
    await guarded(out, async () => {
      const common = { tag, mimeType: mime, cursor, limit: 100 };
      const pageData = q
        ? await get(`${T(slug)}/resources${qs({ q, uriPrefix: prefix, ...common })}`)
        : await get(`${T(slug)}/tree${qs({ prefix, ...common })}`);
      for (const item of pageData.items) {
        const r = q ? item : item.resource;
        if (!q && item.kind === "folder") {
          // A folder may carry its directory resource (inode/directory at the folder's URI without
          // its "/"): one row, the name opens the folder, "directory" opens the resource itself.
          const dir = item.resource;
          append(body, [h("tr", { class: "folder-row", dataset: dir ? { uri: dir.uri } : {} },
            h("td", {}, link(item.name, `#/t/${enc(slug)}/browse${qs({ prefix: item.prefix, tag, mimeType: mime })}`, { class: "folder" }),
              dir ? [" ", link("directory", `#/t/${enc(slug)}/r/${dir.id}`, { class: "directory small", title: dir.uri })] : null,
              dir && dir.title ? h("div", { class: "small muted" }, dir.title) : null),
            h("td", { class: "muted" }, dir ? dir.mimeType : "folder"), h("td"), h("td", {}, dir ? when(dir.updatedAt) : null))]);
        } else {
          append(body, [h("tr", { dataset: { uri: r.uri } },
            h("td", {}, picked.box(r), " ", thumbnail(slug, r), link(q ? r.uri : item.name, `#/t/${enc(slug)}/r/${r.id}`, { class: "file", title: r.uri }), r.title ? h("div", { class: "small muted" }, r.title) : null, snippetOf(r.snippet)),
            h("td", {}, r.mimeType || "—"), h("td", { class: "num" }, bytes(r.size)), h("td", {}, when(r.updatedAt)))]);
        }
        shown += 1;
      }
      cursor = pageData.nextCursor || null;
      more.hidden = !cursor;
      status.textContent = `${shown} ${q ? "matches" : "entries"} shown${cursor ? " (more available)" : ""}`;
    });
    more.disabled = false;
  }
  more.addEventListener("click", load);
  onLiveChange = (change) => {
    if (change.kind === "resource" && (!prefix || (change.uri || "").startsWith(prefix))) {
      status.textContent += " · changed since loaded: ";
      append(status, [link("refresh", location.hash, { id: "refresh", onclick: (e) => { e.preventDefault(); route(); } })]);
    }
  };
  await load();
}

// -- a resource -----------------------------------------------------------------------------------

function displayText(text, mimeType) {
  let shown = text;
  let kind = "text";
  if (/json/.test(mimeType || "")) {
    try { shown = JSON.stringify(JSON.parse(text), null, 2); kind = "JSON"; } catch { kind = "JSON (not valid)"; }
  } else if (/markdown/.test(mimeType || "")) kind = "Markdown source";
  else if (/html|xml/.test(mimeType || "")) kind = "markup source (not rendered)";
  else if (mimeType && !mimeType.startsWith("text/plain")) kind = mimeType;
  return h("figure", {}, h("figcaption", { class: "small muted" }, kind), h("pre", { id: "content-text" }, shown));
}

async function resourcePage(slug, id, params) {
  page("Resource");
  const out = h("div");
  append(main, [out]);
  let current = await guarded(out, () => call("GET", `${T(slug)}/resources/${id}?include=content`));
  if (!current) return;
  render(current);

  function render({ data: r, etag }) {
    clear(main);
    const deleteControl = deleteResource(slug, r, etag);
    const editing = params.get("edit") === "1";
    const links = h("p", {}, link("History", `#/t/${enc(slug)}/r/${id}/history`, { id: "history-link" }), " · ",
      link("Edit", `#/t/${enc(slug)}/r/${id}?edit=1`, { id: "edit-link" }), " · ",
      link("Up to folder", `#/t/${enc(slug)}/browse${qs({ prefix: folderOf(r.uri) })}`), " · ", deleteControl.button);
    const meta = h("dl", { class: "meta", id: "meta" });
    const pairs = [["URI", h("code", {}, r.uri)], ["Name", r.name], ["Title", r.title], ["Description", r.description],
      ["MIME type", r.mimeType], ["Size", bytes(r.size)], ["ETag", h("code", { id: "etag" }, etag)], ["Version", String(r.version)],
      ["Tags", (r.tags || []).length ? r.tags.map((t) => h("span", { class: "tag" }, t)) : "—"],
      ["Annotations", r.annotations ? h("code", {}, JSON.stringify(r.annotations)) : "—"],
      ["Consent message", r.consentMessage],
      ["Cache hint", h("span", { id: "ttl" }, r.ttlMs === undefined || r.ttlMs === null ? "server default" : `${r.ttlMs} ms`)],
      ["Created", when(r.createdAt)], ["Updated", when(r.updatedAt)], ["Blob", r.blobSha256 ? h("code", {}, r.blobSha256) : null]];
    for (const [k, v] of pairs) if (v !== undefined && v !== null && v !== "") append(meta, [h("dt", {}, k), h("dd", {}, v)]);
    const preview = h("section", { class: "preview", id: "preview" });
    const notice = h("div", { id: "live-notice" });
    page(r.name, links, deleteControl.box, notice, h("div", { class: "grid2" }, h("section", {}, h("h2", {}, "Metadata"), meta), h("section", {}, h("h2", {}, "Content"), preview)));
    if (r.text !== undefined && r.text !== null) append(preview, [displayText(r.text, r.mimeType)]);
    else if (r.blobSha256) {
      const mime = r.mimeType || "";
      blobUrls(slug, r.blobSha256, mime).then((urls) => {
        if (urls.preview && urls.type.startsWith("image/")) append(preview, [h("img", { src: urls.preview, alt: `preview of ${r.name}`, id: "image-preview" })]);
        else if (urls.preview) append(preview, [h("iframe", { src: urls.preview, title: `PDF ${r.name}`, id: "pdf-preview" })]);
        append(preview, [h("p", {}, h("a", { href: urls.download, download: r.name }, "Download"), ` (${bytes(r.size)})`)]);
      }).catch((err) => append(preview, [problemBox(err)]));
    } else append(preview, [h("p", { class: "muted" }, r.mimeType === "inode/directory" ? "A directory: no content of its own." : "No content.")]);
    if (editing) append(main, [editForm(r, etag)]);
    onLiveChange = (change) => {
      if (change.kind === "resource" && change.uri === r.uri && change.op !== "created") {
        clear(notice);
        append(notice, [h("div", { class: "notice" }, `This resource was ${change.op} elsewhere (change #${change.seq}). `,
          h("button", { type: "button", class: "secondary", onclick: () => route() }, "Reload"))]);
      }
    };
  }

  function editForm(r, etag) {
    const fields = {
      name: h("input", { id: "edit-name", value: r.name, required: true, size: 40 }),
      title: h("input", { id: "edit-title", value: r.title || "", size: 40 }),
      description: h("input", { id: "edit-description", value: r.description || "", size: 60 }),
      mimeType: h("input", { id: "edit-mime", value: r.mimeType || "", size: 24 }),
      tags: h("input", { id: "edit-tags", value: (r.tags || []).join(", "), size: 40 }),
      // How long an agent's client may keep a read of it (ttlMs); empty: the server's default.
      ttlMs: h("input", { id: "edit-ttl", value: r.ttlMs ?? "", size: 12, inputmode: "numeric", placeholder: "server default" }),
    };
    const hasText = r.text !== undefined && r.text !== null || (!r.blobSha256 && r.mimeType !== "inode/directory");
    const text = hasText ? h("textarea", { id: "edit-text", spellcheck: false }) : null;
    if (text) text.value = r.text || "";
    const out = h("div", { id: "save-result" });
    const form = h("form", { id: "edit-form" }, h("h2", {}, "Edit"),
      field("Name", fields.name), field("Title", fields.title), field("Description", fields.description),
      field("MIME type", fields.mimeType), field("Tags (comma separated)", fields.tags),
      field("Cache hint in ms (ttlMs; empty: the server's default)", fields.ttlMs),
      text ? field("Text", text) : null,
      h("button", { type: "submit", id: "save" }, "Save"), " ", link("Cancel", `#/t/${enc(slug)}/r/${id}`), out);
    function body() {
      const b = {
        name: fields.name.value,
        title: fields.title.value || null,
        description: fields.description.value || null,
        mimeType: fields.mimeType.value || null,
        tags: fields.tags.value.split(",").map((t) => t.trim()).filter(Boolean),
        ttlMs: ttlValue(fields.ttlMs.value),
      };
      if (text) b.text = text.value;
      return b;
    }
    async function save(ifMatch) {
      clear(out);
      try {
        const { data } = await call("PATCH", `${T(slug)}/resources/${id}`, { body: body(), headers: { "If-Match": ifMatch } });
        notify(`Saved ${data.name} (version ${data.version})`, { kind: "success" });
        location.hash = `#/t/${enc(slug)}/r/${id}`;
      } catch (err) {
        if (err instanceof ApiError && err.status === 412) return conflict();
        append(out, [problemBox(err)]);
      }
    }
    async function conflict() {
      const theirs = await call("GET", `${T(slug)}/resources/${id}?include=content`);
      const t = theirs.data;
      const rows = lineDiff(t.text ?? JSON.stringify(t, null, 2), text ? text.value : JSON.stringify(body(), null, 2));
      append(out, [h("div", { class: "conflict", id: "conflict", role: "alert" },
        h("strong", {}, "412 — someone else changed this resource while you were editing."),
        h("p", {}, `It is now at version ${t.version} (ETag ${theirs.etag}), changed ${when(t.updatedAt)}. Their version (−) against yours (+):`),
        h("div", { class: "diff mono" }, rows.map(([op, line]) => h("span", { class: op === "+" ? "add" : op === "-" ? "del" : "" }, `${op} ${line}`))),
        h("div", { class: "bar" },
          h("button", { type: "button", class: "secondary", id: "conflict-reload", onclick: () => route() }, "Reload (discard my edit)"),
          h("button", { type: "button", class: "danger", id: "conflict-overwrite", onclick: () => save(theirs.etag) }, "Overwrite with mine")))]);
      document.getElementById("conflict-reload").focus();
    }
    form.addEventListener("submit", (event) => { event.preventDefault(); save(etag); });
    return form;
  }
}

async function newResourcePage(slug, params) {
  const uri = h("input", { id: "new-uri", value: params.get("prefix") || "file:///", required: true, size: 60 });
  const name = h("input", { id: "new-name", required: true });
  const mime = h("input", { id: "new-mime", value: "text/plain" });
  const text = h("textarea", { id: "new-text" });
  const out = h("div");
  const form = h("form", { id: "new-resource" }, field("URI", uri), field("Name", name), field("MIME type", mime), field("Text", text), h("button", { type: "submit" }, "Create"), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(out);
    await guarded(out, async () => {
      const { data } = await call("POST", `${T(slug)}/resources`, { body: { uri: uri.value, name: name.value, mimeType: mime.value || undefined, text: text.value } });
      location.hash = `#/t/${enc(slug)}/r/${data.id}`;
    });
  });
  page("New resource", form);
}

// -- history --------------------------------------------------------------------------------------

// Who made a change: the author's name as the API gives it (a token by its name), the recorded
// label (a version's changedBy, an audit entry's principal) as a tooltip.
function authorName(a) {
  return a.revoked ? `${a.name} (revoked)` : a.name;
}
function authorCell(author, label) {
  if (!author) return h("td", {}, label);
  return h("td", { class: "author", title: label, dataset: { kind: author.kind } }, authorName(author));
}

// A notice for a failed action of this page: the problem's title and detail, until dismissed.
function failNotice(err) {
  if (signedOutBy(err)) return undefined;
  const p = err instanceof ApiError ? err.problem : { title: "Error", detail: String(err && err.message) };
  const status = err instanceof ApiError ? `${err.status} ` : "";
  return notify(`${status}${p.title || "Error"}${p.detail ? `: ${p.detail}` : ""}`, { kind: "error" });
}

async function historyPage(slug, id) {
  page("History");
  const out = h("div");
  append(main, [out]);
  const base = `${T(slug)}/resources/${id}/versions`;
  const first = await guarded(out, () => get(`${base}${qs({ limit: 50 })}`));
  if (!first) return;
  const latest = first.items.length ? first.items[0].version : 0;
  const pick = { a: first.items.length > 1 ? first.items[1].version : latest, b: latest };
  const diff = h("section", { id: "diff" });
  const body = h("tbody");
  const older = h("button", { type: "button", class: "secondary", id: "versions-older", hidden: true }, "Older versions");
  const shown = h("p", { class: "muted small", id: "versions-status" });
  let cursor = null;
  let count = 0;
  const row = (v) => h("tr", { dataset: { version: String(v.version) } },
    h("td", {}, radio("a", v.version)), h("td", {}, radio("b", v.version)),
    h("td", {}, `v${v.version}`), h("td", {}, when(v.changedAt)), authorCell(v.author, v.changedBy),
    h("td", {}, h("code", { class: "small" }, v.resource.uri)),
    h("td", {}, v.version === latest ? h("span", { class: "muted" }, "current") : twoStep(`Restore v${v.version}`, `Confirm restore of v${v.version}`, async () => {
      try {
        const { data } = await call("POST", `${T(slug)}/resources/${id}/versions/${v.version}/restore`);
        notify(`Restored v${v.version} as v${data.version}`, { kind: "success" });
        location.hash = `#/t/${enc(slug)}/r/${id}`;
      } catch (err) {
        failNotice(err);
      }
    }, "danger")));
  function show(pageData) {
    append(body, pageData.items.map(row));
    count += pageData.items.length;
    cursor = pageData.nextCursor || null;
    older.hidden = !cursor;
    shown.textContent = `${count} version${count === 1 ? "" : "s"} shown${cursor ? "; older ones on the next page" : ""}`;
  }
  older.addEventListener("click", async () => {
    older.disabled = true;
    await guarded(out, async () => show(await get(`${base}${qs({ limit: 50, cursor })}`)));
    older.disabled = false;
  });
  function radio(side, version) {
    const r = h("input", { type: "radio", name: `side-${side}`, value: String(version), "aria-label": `${side === "a" ? "from" : "to"} v${version}` });
    r.checked = pick[side] === version;
    r.addEventListener("change", () => { pick[side] = version; });
    return r;
  }
  const compare = h("button", { type: "button", id: "compare" }, "Compare selected");
  compare.addEventListener("click", () => guarded(diff, async () => {
    clear(diff);
    const [a, b] = await Promise.all([get(`${base}/${pick.a}`), get(`${base}/${pick.b}`)]);
    const metaRows = lineDiff(JSON.stringify(a.resource, null, 2), JSON.stringify(b.resource, null, 2));
    const textRows = lineDiff(a.text ?? (a.blobSha256 ? `blob ${a.blobSha256}` : ""), b.text ?? (b.blobSha256 ? `blob ${b.blobSha256}` : ""));
    const showDiff = (rowsOf) => h("div", { class: "diff mono" }, rowsOf.map(([op, line]) => h("span", { class: op === "+" ? "add" : op === "-" ? "del" : "" }, `${op} ${line}`)));
    append(diff, [h("h2", {}, `v${a.version} → v${b.version}`), h("h3", {}, "Metadata"), showDiff(metaRows), h("h3", {}, "Content"), showDiff(textRows)]);
  }));
  show(first);
  page("History", h("p", {}, link("Back to the resource", `#/t/${enc(slug)}/r/${id}`)),
    h("table", { id: "versions" }, h("thead", {}, h("tr", {}, h("th", {}, "From"), h("th", {}, "To"), h("th", {}, "Version"), h("th", {}, "When"), h("th", {}, "By"), h("th", {}, "URI"), h("th", {}, ""))), body),
    shown, older, h("p", {}, compare), diff, out);
}

// -- upload ---------------------------------------------------------------------------------------

function uploadPage(slug, params) {
  const prefix = h("input", { id: "upload-prefix", value: params.get("prefix") || "file:///uploads/", size: 50 });
  const input = h("input", { type: "file", id: "upload-files", multiple: true });
  const list = h("ul", { id: "upload-list" });
  const zone = h("div", { class: "drop", id: "drop-zone" }, "Drop files here, or choose them: ", input);
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => { e.preventDefault(); zone.classList.remove("over"); send([...e.dataTransfer.files]); });
  input.addEventListener("change", () => send([...input.files]));
  async function send(files) {
    await Promise.all(files.map(async (file) => {
      const bar = h("progress", { max: 1, value: 0 });
      const state = h("span", {}, " uploading…");
      const item = h("li", { dataset: { file: file.name } }, h("code", {}, file.name), ` (${bytes(file.size)}) `, bar, state);
      append(list, [item]);
      try {
        const blob = await upload(slug, file, (f) => { bar.value = f; });
        bar.value = 1;
        const uri = prefix.value + file.name;
        const { data } = await call("PUT", `${T(slug)}/resources${qs({ uri })}`, { body: { name: file.name, mimeType: blob.mimeType || file.type || undefined, blobSha256: blob.sha256 } });
        clear(state);
        append(state, [" done: ", link(uri, `#/t/${enc(slug)}/r/${data.id}`)]);
      } catch (err) {
        clear(state);
        append(state, [problemBox(err)]);
      }
    }));
  }
  page("Upload", field("Into folder (URI prefix)", prefix), zone, list);
}

// -- templates ------------------------------------------------------------------------------------

async function templatesPage(slug, params) {
  const editId = params.get("edit");
  const list = h("div");
  const editor = h("section", { id: "template-editor" });
  page("Templates", list, editor);
  await guarded(list, async () => {
    const { items } = await get(`${T(slug)}/templates?limit=1000`);
    append(list, [h("table", { id: "templates" }, h("thead", {}, h("tr", {}, h("th", {}, "URI template"), h("th", {}, "Name"), h("th", {}, "MIME type"), h("th", {}, ""))),
      h("tbody", {}, items.map((t) => h("tr", {}, h("td", {}, h("code", {}, t.uriTemplate)), h("td", {}, t.name), h("td", {}, t.mimeType || "—"),
        h("td", {}, link("Edit", `#/t/${enc(slug)}/templates?edit=${t.id}`), " ", twoStep("Delete", "Confirm delete", () => guarded(list, async () => { await call("DELETE", `${T(slug)}/templates/${t.id}`); route(); }))))))),
    h("p", {}, link("New template", `#/t/${enc(slug)}/templates?edit=new`, { id: "new-template" }))]);
  });
  if (!editId) return;
  let existing = null;
  if (editId !== "new") existing = await guarded(editor, () => get(`${T(slug)}/templates/${editId}`));
  const f = {
    uriTemplate: h("input", { id: "tpl-uri", value: existing?.uriTemplate || "", size: 50, required: true, placeholder: "file:///users/{id}.json" }),
    name: h("input", { id: "tpl-name", value: existing?.name || "", required: true }),
    mimeType: h("input", { id: "tpl-mime", value: existing?.mimeType || "" }),
    text: h("textarea", { id: "tpl-text", spellcheck: false }),
  };
  f.text.value = existing?.text || "";
  const args = h("div", { id: "tpl-args" });
  const values = {};
  const preview = h("div", { id: "tpl-preview", "aria-live": "polite" });
  const out = h("div");
  let timer = null;
  const refresh = () => { clearTimeout(timer); timer = setTimeout(renderPreview, 200); };
  async function renderPreview() {
    clear(preview);
    if (!f.uriTemplate.value) return;
    try {
      const { data } = await call("POST", `${T(slug)}/templates/preview`, { body: { uriTemplate: f.uriTemplate.value, mimeType: f.mimeType.value || undefined, text: f.text.value || undefined, arguments: values } });
      const names = [...args.querySelectorAll("input")].map((i) => i.name);
      if (names.join() !== data.variables.join()) {
        clear(args);
        for (const v of data.variables) {
          const input = h("input", { name: v, id: `tpl-arg-${v}`, value: values[v] || "" });
          input.addEventListener("input", () => { values[v] = input.value; refresh(); });
          append(args, [field(`Sample ${v}`, input)]);
        }
      }
      append(preview, [h("p", {}, "Expands to ", h("code", { id: "tpl-preview-uri" }, data.uri)), data.text !== undefined ? h("pre", { id: "tpl-preview-text" }, data.text) : null]);
    } catch (err) {
      append(preview, [problemBox(err)]);
    }
  }
  for (const input of [f.uriTemplate, f.mimeType, f.text]) input.addEventListener("input", refresh);
  const form = h("form", { id: "template-form" }, h("h2", {}, existing ? `Edit ${existing.uriTemplate}` : "New template"),
    field("URI template", f.uriTemplate), field("Name", f.name), field("MIME type", f.mimeType), field("Body ({variable} placeholders)", f.text),
    h("h3", {}, "Preview"), args, preview, h("button", { type: "submit", id: "tpl-save" }, "Save template"), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(out);
    await guarded(out, async () => {
      const body = { uriTemplate: f.uriTemplate.value, name: f.name.value, mimeType: f.mimeType.value || null, text: f.text.value || null };
      if (existing) await call("PATCH", `${T(slug)}/templates/${existing.id}`, { body });
      else await call("POST", `${T(slug)}/templates`, { body });
      location.hash = `#/t/${enc(slug)}/templates`;
    });
  });
  append(editor, [form]);
  renderPreview();
}

// -- grants ---------------------------------------------------------------------------------------

async function grantsPage(slug, params) {
  const list = h("div");
  const scope = h("input", { id: "grant-scope", required: true, value: params.get("scope") || "" });
  const kind = h("select", { id: "grant-kind" }, h("option", { value: "uriPrefix" }, "URI prefix"), h("option", { value: "uri" }, "exact URI"), h("option", { value: "tag" }, "tag"));
  const value = h("input", { id: "grant-value", required: true, size: 40 });
  const out = h("div");
  const form = h("form", { class: "inline", id: "grant-form" }, field("Scope", scope), field("Selector", kind), field("Value", value), h("button", { type: "submit" }, "Add grant"));
  const previewScope = h("input", { id: "preview-scope", value: params.get("scope") || "" });
  const previewOut = h("div", { id: "scope-preview", "aria-live": "polite" });
  const previewForm = h("form", { class: "inline", id: "preview-form" }, field("Scope", previewScope), h("button", { type: "submit" }, "Preview what it sees"));
  page("Grants", h("h2", {}, "Add a grant"), form, out, h("h2", {}, "What a scope sees"), previewForm, previewOut, h("h2", {}, "All grants"), list);
  async function preview(s) {
    clear(previewOut);
    if (!s) return;
    await guarded(previewOut, async () => {
      const p = await get(`${T(slug)}/grants/preview${qs({ scope: s })}`);
      append(previewOut, [h("p", { id: "scope-count" }, `Scope “${p.scope}” sees ${p.count.toLocaleString("en")} resource${p.count === 1 ? "" : "s"}`, p.count ? `; first ${p.items.length}:` : "."),
        h("ul", {}, p.items.map((i) => h("li", {}, link(i.uri, `#/t/${enc(slug)}/r/${i.id}`))))]);
    });
  }
  previewForm.addEventListener("submit", (e) => { e.preventDefault(); preview(previewScope.value.trim()); });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(out);
    await guarded(out, async () => {
      const { data } = await call("POST", `${T(slug)}/grants`, { body: { scope: scope.value.trim(), [kind.value]: value.value } });
      for (const w of data.warnings || []) append(out, [h("div", { class: "notice" }, w)]);
      previewScope.value = data.scope;
      await Promise.all([load(), preview(data.scope)]);
    });
  });
  async function load() {
    clear(list);
    await guarded(list, async () => {
      const { items } = await get(`${T(slug)}/grants`);
      append(list, [h("table", { id: "grants" }, h("thead", {}, h("tr", {}, h("th", {}, "Scope"), h("th", {}, "Gives sight of"), h("th", {}, "Created"), h("th", {}, ""))),
        h("tbody", {}, items.map((g) => h("tr", {}, h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => { previewScope.value = g.scope; preview(g.scope); } }, g.scope)),
          h("td", {}, g.uri ? ["URI ", h("code", {}, g.uri)] : g.uriPrefix ? ["prefix ", h("code", {}, g.uriPrefix)] : ["tag ", h("span", { class: "tag" }, g.tag)]),
          h("td", {}, when(g.createdAt)), h("td", {}, twoStep("Remove", "Confirm remove", () => guarded(list, async () => { await call("DELETE", `${T(slug)}/grants/${g.id}`); await Promise.all([load(), preview(previewScope.value.trim())]); })))))))]);
    });
  }
  await Promise.all([load(), preview(previewScope.value.trim())]);
}

// -- tokens ---------------------------------------------------------------------------------------

async function tokensPage(slug) {
  const list = h("div");
  const name = h("input", { id: "token-name" });
  const scopes = h("input", { id: "token-scopes", placeholder: "agents, public", size: 30 });
  const admin = h("input", { type: "checkbox", id: "token-admin" });
  const expires = h("input", { type: "date", id: "token-expires" });
  const out = h("div", { id: "token-created" });
  const form = h("form", { class: "inline", id: "token-form" }, field("Name", name), field("Scopes (comma separated)", scopes), field("Tenant admin", admin), field("Expires", expires), h("button", { type: "submit" }, "Create token"));
  page("Tokens", h("h2", {}, "New token"), form, out, h("h2", {}, "Tokens"), list);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(out);
    await guarded(out, async () => {
      const body = { name: name.value || undefined, scopes: scopes.value.split(",").map((s) => s.trim()).filter(Boolean), admin: admin.checked };
      if (expires.value) body.expiresAt = new Date(`${expires.value}T23:59:59Z`).toISOString();
      const { data } = await call("POST", `${T(slug)}/tokens`, { body });
      const secret = h("code", { id: "token-secret" }, data.token);
      const copy = h("button", { type: "button", id: "copy-token" }, "Copy");
      copy.addEventListener("click", async () => {
        try { await navigator.clipboard.writeText(data.token); copy.textContent = "Copied"; } catch { copy.textContent = "Copy failed: select the text"; }
      });
      append(out, [h("div", { class: "secret", role: "status" }, h("strong", {}, "Copy this token now: it is shown only once."), h("p", {}, secret, " ", copy),
        h("button", { type: "button", class: "secondary", onclick: () => clear(out) }, "Done"))]);
      copy.focus();
      await load();
    });
  });
  async function load() {
    clear(list);
    await guarded(list, async () => {
      const { items } = await get(`${T(slug)}/tokens`);
      append(list, [h("table", { id: "tokens" }, h("thead", {}, h("tr", {}, h("th", {}, "Id"), h("th", {}, "Name"), h("th", {}, "Scopes"), h("th", {}, "Admin"), h("th", {}, "Expires"), h("th", {}, "State"), h("th", {}, ""))),
        h("tbody", {}, items.map((t) => h("tr", { dataset: { id: String(t.id) } }, h("td", {}, String(t.id)), h("td", {}, t.name || "—"), h("td", {}, tokenSight(slug, t)),
          h("td", {}, t.admin ? "yes" : "no"), h("td", {}, when(t.expiresAt)), h("td", {}, t.revokedAt ? `revoked ${when(t.revokedAt)}` : "active"),
          h("td", {}, t.revokedAt ? null : twoStep("Revoke", "Confirm revoke", () => guarded(list, async () => { await call("DELETE", `${T(slug)}/tokens/${t.id}`); await load(); })))))))]);
    });
  }
  await load();
}

// -- activity -------------------------------------------------------------------------------------

async function activityPage(slug) {
  const auditFilter = h("input", { type: "search", id: "audit-filter", placeholder: "action, who or URI" });
  const auditBody = h("tbody");
  const auditMore = h("button", { type: "button", class: "secondary", hidden: true }, "Older entries");
  const kind = h("select", { id: "changes-kind" }, ["", "resource", "template", "grant"].map((k) => h("option", { value: k }, k || "any kind")));
  const op = h("select", { id: "changes-op" }, ["", "created", "updated", "deleted"].map((k) => h("option", { value: k }, k || "any change")));
  const uriFilter = h("input", { type: "search", id: "changes-uri", placeholder: "URI contains" });
  const after = h("input", { type: "number", id: "changes-after", min: 0, placeholder: "latest", size: 8 });
  const changesBody = h("tbody", { id: "changes-body" });
  const changesMore = h("button", { type: "button", class: "secondary", hidden: true }, "Later changes");
  const out = h("div");
  page("Activity", out,
    h("h2", {}, "Change feed ", h("span", { class: "small muted" }, "(live)")),
    h("div", { class: "bar" }, field("Kind", kind), field("Change", op), field("URI", uriFilter), field("After seq", after), h("button", { type: "button", id: "changes-load", onclick: () => { clear(changesBody); last = after.value === "" ? null : Number(after.value); loadChanges(); } }, "Load")),
    h("table", { id: "changes" }, h("thead", {}, h("tr", {}, h("th", {}, "Seq"), h("th", {}, "Kind"), h("th", {}, "Change"), h("th", {}, "URI"), h("th", {}, "At"))), changesBody), changesMore,
    h("h2", {}, "Audit log"), h("div", { class: "bar" }, field("Filter", auditFilter)),
    h("table", { id: "audit" }, h("thead", {}, h("tr", {}, h("th", {}, "When"), h("th", {}, "Who"), h("th", {}, "Action"), h("th", {}, "Target"))), auditBody), auditMore);
  const matches = (row) => {
    const text = row.dataset.search || "";
    return text.includes(auditFilter.value.toLowerCase());
  };
  const changeVisible = (c) => (!kind.value || c.kind === kind.value) && (!op.value || c.op === op.value) && (!uriFilter.value || (c.uri || "").includes(uriFilter.value));
  const applyFilters = () => {
    for (const row of auditBody.children) row.hidden = !matches(row);
    for (const row of changesBody.children) row.hidden = !changeVisible(JSON.parse(row.dataset.change));
  };
  for (const input of [auditFilter, kind, op, uriFilter]) input.addEventListener("input", applyFilters);
  const changeRow = (c) => {
    const row = h("tr", { dataset: { change: JSON.stringify(c), seq: String(c.seq) } }, h("td", { class: "num" }, String(c.seq)), h("td", {}, c.kind), h("td", {}, c.op), h("td", {}, h("code", {}, c.uri || "")), h("td", {}, when(c.at)));
    row.hidden = !changeVisible(c);
    return row;
  };
  let auditCursor = null;
  let last = null; // null: start with the latest changes
  async function loadAudit() {
    await guarded(out, async () => {
      const p = await get(`${T(slug)}/audit${qs({ cursor: auditCursor, limit: 100 })}`);
      for (const e of p.items) {
        const who = e.author ? `${e.principal} ${authorName(e.author)}` : e.principal;
        const row = h("tr", { dataset: { search: `${e.action} ${who} ${e.uri || ""}`.toLowerCase() } }, h("td", {}, when(e.at)), authorCell(e.author, e.principal), h("td", {}, e.action), h("td", {}, h("code", {}, e.uri || `${e.targetKind} ${e.targetId ?? ""}`)));
        row.hidden = !matches(row);
        append(auditBody, [row]);
      }
      auditCursor = p.nextCursor || null;
      auditMore.hidden = !auditCursor;
    });
  }
  async function loadChanges() {
    await guarded(out, async () => {
      const p = await get(`${T(slug)}/changes${last === null ? qs({ tail: 100 }) : qs({ after: last, limit: 500 })}`);
      addNewest(p.items);
      last = p.lastSeq;
      changesMore.hidden = !p.nextCursor;
    });
  }
  // The feed is shown newest first: changes (oldest first, as the API gives them) go on top. A
  // reader who has scrolled down keeps what they read where it was.
  function addNewest(items) {
    if (!items.length) return;
    const anchor = window.scrollY > 0 ? readingAnchor() : null;
    const top = anchor && anchor.getBoundingClientRect().top;
    for (const c of items) changesBody.prepend(changeRow(c));
    if (anchor) window.scrollBy(0, anchor.getBoundingClientRect().top - top);
  }
  function readingAnchor() {
    for (const row of changesBody.children) if (!row.hidden && row.getBoundingClientRect().bottom > 0) return row;
    return document.getElementById("audit");
  }
  auditMore.addEventListener("click", loadAudit);
  changesMore.addEventListener("click", loadChanges);
  onLiveChange = (c) => { if (last !== null && c.seq > last) { addNewest([c]); last = c.seq; } };
  await Promise.all([loadAudit(), loadChanges()]);
}

// -- curator verbs: delete a resource, act on a selection, thumbnails, what a token sees ----------

const folderOf = (uri) => uri.slice(0, uri.lastIndexOf("/") + 1);

// The resource page's Delete: a confirm step naming the URI, then DELETE with the ETag the page
// was rendered from (If-Match), so a resource changed meanwhile is a 412 and is not deleted.
function deleteResource(slug, r, etag) {
  const box = h("div", { id: "delete-box" });
  const button = h("button", { type: "button", class: "secondary", id: "delete-resource" }, "Delete…");
  button.addEventListener("click", () => {
    clear(box);
    const out = h("div");
    const go = h("button", { type: "button", class: "danger", id: "delete-confirm" }, `Delete ${r.uri}`);
    const cancel = h("button", { type: "button", class: "secondary", id: "delete-cancel" }, "Cancel");
    cancel.addEventListener("click", () => { clear(box); button.focus(); });
    // As the editor does on a 412: say what changed, then reload or act on the version now there.
    const attempt = (ifMatch) => guarded(out, async () => {
      clear(out);
      go.disabled = true;
      try {
        await call("DELETE", `${T(slug)}/resources/${r.id}`, { headers: { "If-Match": ifMatch } });
      } catch (err) {
        go.disabled = false;
        if (!(err instanceof ApiError && err.status === 412)) throw err;
        const now = await call("GET", `${T(slug)}/resources/${r.id}`);
        append(out, [h("div", { class: "conflict", role: "alert", id: "delete-conflict" },
          h("strong", {}, "412 — this resource changed since the page was loaded; nothing was deleted."),
          h("p", {}, `It is now at version ${now.data.version} (ETag ${now.etag}), changed ${when(now.data.updatedAt)} by another writer.`),
          h("div", { class: "bar" },
            h("button", { type: "button", class: "secondary", id: "delete-reload", onclick: () => route() }, "Reload (keep it)"),
            h("button", { type: "button", class: "danger", id: "delete-anyway", onclick: () => attempt(now.etag) }, "Delete it anyway")))]);
        document.getElementById("delete-reload").focus();
        return;
      }
      location.hash = `#/t/${enc(slug)}/browse${qs({ prefix: folderOf(r.uri) })}`;
    });
    go.addEventListener("click", () => attempt(etag));
    append(box, [h("div", { class: "conflict", role: "alertdialog", "aria-label": "Confirm delete", id: "delete-dialog" },
      h("p", {}, "Delete ", h("code", {}, r.uri), "? Agents stop seeing it at once."),
      h("div", { class: "bar" }, go, cancel), out)]);
    go.focus();
  });
  return { button, box };
}

// Checkboxes on the listing's resource rows and a bar acting on the ones picked, through one
// POST .../resources/batch (all or nothing: a refusal names the resources and changes none).
function selection(slug, reload) {
  const chosen = new Map(); // id -> URI, in the order picked
  const boxes = new Set();
  const all = h("input", { type: "checkbox", id: "select-all", "aria-label": "Select every resource shown" });
  const count = h("strong", { id: "selection-count" });
  const step = h("div", { id: "selection-step" });
  const out = h("div", { id: "selection-result", "aria-live": "polite" });
  const action = (label, id, open) => h("button", { type: "button", class: "secondary", id, onclick: () => { clear(step); clear(out); open(); } }, label);
  const actions = h("div", { class: "bar" }, count,
    action("Delete", "selection-delete", askDelete), action("Add tag…", "selection-tag", askTag),
    action("Grant…", "selection-grant", askGrant),
    h("button", { type: "button", class: "secondary", id: "selection-clear", onclick: () => pick([], false) }, "Clear"));
  const bar = h("section", { class: "selection", id: "selection-bar", "aria-label": "Selected resources" }, actions, step, out);
  function refresh() {
    actions.hidden = chosen.size === 0;
    count.textContent = `${chosen.size} selected`;
    all.checked = boxes.size > 0 && [...boxes].every((b) => b.checked);
    if (!chosen.size) clear(step);
  }
  function pick(which, on) {
    for (const b of which.length ? which : boxes) {
      b.checked = on;
      if (on) chosen.set(Number(b.value), b.dataset.uri); else chosen.delete(Number(b.value));
    }
    if (!which.length && !on) chosen.clear();
    refresh();
  }
  all.addEventListener("change", () => pick([...boxes], all.checked));
  function box(r) {
    const b = h("input", { type: "checkbox", class: "select", value: String(r.id), "aria-label": `Select ${r.uri}`, dataset: { uri: r.uri } });
    b.addEventListener("change", () => pick([b], b.checked));
    boxes.add(b);
    return b;
  }
  function ask(label, input, submitLabel, submitId, send) {
    const form = h("form", { class: "inline" }, input ? field(label, input) : h("span", {}, label), h("button", { type: "submit", id: submitId, class: input ? "" : "danger" }, submitLabel));
    form.addEventListener("submit", (e) => { e.preventDefault(); send(); });
    append(step, [form]);
    (input || form.querySelector("button")).focus();
  }
  function askDelete() {
    const n = chosen.size;
    ask(`Delete ${[...chosen.values()].slice(0, 3).join(", ")}${n > 3 ? ` and ${n - 3} more` : ""}?`, null,
      `Delete ${n} resource${n === 1 ? "" : "s"}`, "selection-delete-confirm",
      () => run({ action: "delete" }, (d) => `Deleted ${d.changed} resource${d.changed === 1 ? "" : "s"}.`));
  }
  function askTag() {
    const tag = h("input", { id: "selection-tag-value", required: true, size: 16 });
    ask("Tag", tag, "Add tag", "selection-tag-apply",
      () => run({ action: "tag", tag: tag.value.trim() }, (d) => `Tagged ${d.changed} of ${d.ids.length} with “${tag.value.trim()}” (the others had it).`));
  }
  function askGrant() {
    const scope = h("input", { id: "selection-scope", required: true, size: 16, placeholder: "agents" });
    ask("Scope", scope, "Grant each URI", "selection-grant-apply", () => {
      const s = scope.value.trim();
      return run({ action: "grant", scope: s }, (d) => [`Scope “${s}” got ${d.changed} new grant${d.changed === 1 ? "" : "s"} of ${d.ids.length} URI${d.ids.length === 1 ? "" : "s"}. `,
        link("What it sees", `#/t/${enc(slug)}/grants${qs({ scope: s })}`, { id: "selection-preview" })]);
    });
  }
  async function run(body, describe) {
    const ids = [...chosen.keys()];
    const uris = [...chosen.values()];
    clear(out);
    await guarded(out, async () => {
      let data;
      try {
        ({ data } = await call("POST", `${T(slug)}/resources/batch`, { body: { ...body, ids } }));
      } catch (err) {
        // The API points at /ids/N: name the resource instead.
        for (const e of (err instanceof ApiError && err.problem.errors) || []) {
          const at = /^\/ids\/(\d+)$/.exec(e.pointer || "");
          if (at && uris[Number(at[1])] !== undefined) e.pointer = uris[Number(at[1])];
        }
        throw err;
      }
      chosen.clear();
      boxes.clear();
      clear(step);
      append(out, [h("div", { class: "notice", role: "status", id: "selection-done" }, describe(data))]);
      await reload();
    });
    refresh();
  }
  refresh();
  return { bar, all, box };
}

// Thumbnails of small images in the listing: fetched with the token only when the row scrolls
// into view, a few at a time, and only for the types the resource page previews (isPreviewableImage:
// never SVG); a bigger image or another type keeps the plain file icon.
const THUMBNAIL_MAX_BYTES = 256 * 1024;
const THUMBNAILS_AT_ONCE = 4;
// One set per listing shown: a new listing revokes the last one's object URLs and stops its watcher.
const freshThumbnails = () => ({ urls: [], queue: [], running: 0, watcher: null, fetches: new WeakMap() });
let thumbnails = freshThumbnails();

function resetThumbnails() {
  if (thumbnails.watcher) thumbnails.watcher.disconnect();
  for (const url of thumbnails.urls) URL.revokeObjectURL(url);
  thumbnails = freshThumbnails();
}

function thumbnail(slug, r) {
  if (!r.blobSha256 || !isPreviewableImage(r.mimeType) || !(r.size <= THUMBNAIL_MAX_BYTES)) return null;
  const own = thumbnails;
  const img = h("img", { class: "thumb", alt: "", width: 32, height: 32, dataset: { state: "waiting" } });
  own.fetches.set(img, async () => {
    img.dataset.state = "loading";
    try {
      const url = await imageUrl(slug, r.blobSha256, r.mimeType);
      own.urls.push(url);
      img.addEventListener("load", () => { img.dataset.state = "shown"; }, { once: true });
      img.addEventListener("error", () => { img.dataset.state = "failed"; }, { once: true });
      img.src = url;
    } catch {
      img.dataset.state = "failed";
    }
  });
  if (!own.watcher) {
    own.watcher = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        own.watcher.unobserve(entry.target);
        own.queue.push(own.fetches.get(entry.target));
      }
      pump(own);
    }, { rootMargin: "200px" });
  }
  own.watcher.observe(img);
  return img;
}

function pump(own) {
  while (own.running < THUMBNAILS_AT_ONCE && own.queue.length) {
    const next = own.queue.shift();
    own.running += 1;
    next().finally(() => { own.running -= 1; pump(own); });
  }
}

// A token's scopes on the tokens page, each a link to what that scope sees (the grants page's
// preview, GET .../grants/preview); an admin token sees everything of its tenant.
function tokenSight(slug, t) {
  const scopes = t.scopes.map((s) => link(s, `#/t/${enc(slug)}/grants${qs({ scope: s })}`, { class: "tag scope-link", title: `What scope ${s} sees` }));
  if (t.admin) return [scopes, h("span", { class: "small muted" }, " tenant admin: sees everything")];
  if (!scopes.length) return h("span", { class: "small muted" }, "no scope: sees nothing");
  return [scopes, scopes.length > 1 ? h("span", { class: "small muted" }, " (sees what any of them sees)") : null];
}

// -- routing --------------------------------------------------------------------------------------

async function route() {
  onLiveChange = null;
  const { parts, params } = parseRoute();
  if (!session.token) { followTenant(null); renderNav(null); return signInPage(); }
  if (!me) {
    try { me = await get("whoami"); } catch (err) {
      session.signOut();
      return signInPage(err instanceof ApiError ? `${err.status} ${err.problem.title}: ${err.problem.detail || ""}` : String(err));
    }
    renderWho();
  }
  if (parts[0] === "signin") return signInPage();
  if (parts[0] === "t" && parts[1]) {
    const slug = parts[1];
    const section = parts[2] || "browse";
    renderNav(slug, section === "r" || section === "new" ? "browse" : section);
    followTenant(slug);
    switch (section) {
      case "browse": return browsePage(slug, params);
      case "new": return newResourcePage(slug, params);
      case "r": return parts[4] === "history" ? historyPage(slug, parts[3]) : resourcePage(slug, parts[3], params);
      case "upload": return uploadPage(slug, params);
      case "templates": return templatesPage(slug, params);
      case "grants": return grantsPage(slug, params);
      case "tokens": return tokensPage(slug);
      case "activity": return activityPage(slug);
      default: return page("Not found", h("p", {}, "No such page."));
    }
  }
  followTenant(null);
  if (me.kind !== "platform") { location.hash = `#/t/${enc(me.tenant)}/browse`; return undefined; }
  renderNav(null, "tenants");
  return tenantsPage();
}

window.addEventListener("hashchange", route);
route();
