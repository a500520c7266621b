// The console's only way to the server: the admin REST API, with the bearer token of this tab.

const KEY = "catalog.console.token";
export const API = "/admin/v1";

export const session = {
  get token() { return sessionStorage.getItem(KEY); },
  signIn(token) { sessionStorage.setItem(KEY, token); },
  signOut() { sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function headers(extra = {}) {
  const out = { Accept: "application/json", ...extra };
  if (session.token) out.Authorization = `Bearer ${session.token}`;
  return out;
}

async function problemOf(response) {
  const type = response.headers.get("content-type") || "";
  if (type.includes("json")) {
    try { return await response.json(); } catch { /* fall through */ }
  }
  return { title: response.statusText || "Error", status: response.status, detail: `HTTP ${response.status}` };
}

// A JSON request; answers {data, etag, status}; a problem answer throws ApiError.
export async function call(method, path, { body, headers: extra, raw } = {}) {
  const init = { method, headers: headers(extra) };
  if (body !== undefined) {
    if (raw) init.body = body;
    else { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
  }
  const response = await fetch(path.startsWith("/") ? path : `${API}/${path}`, init);
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  const data = response.status === 204 ? null : await response.json();
  return { data, etag: response.headers.get("ETag"), status: response.status };
}

export const get = (path, opts) => call("GET", path, opts).then((r) => r.data);

// Types the console renders from a blob: images a browser only decodes, and PDF (Chromium's viewer
// runs none of a PDF's script in the page's origin). An object URL belongs to the console's origin
// and carries none of the server's download headers (attachment, nosniff, sandbox CSP): typed as a
// curator's HTML or SVG, it would run that file's script as the console when opened in a tab.
const PREVIEWABLE = new Set(["image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "application/pdf"]);

async function blobBytes(slug, sha256) {
  const response = await fetch(`${API}/tenants/${encodeURIComponent(slug)}/blobs/${sha256}`, { headers: headers() });
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  return response.blob();
}

const essenceOf = (mimeType) => (mimeType || "").split(";", 1)[0].trim().toLowerCase();

// Bytes of a blob as object URLs (the <img>/<iframe> cannot send the token themselves): `download`
// always, typed application/octet-stream so that opening it saves the bytes instead of rendering
// them, and `preview`, typed, only for a type in PREVIEWABLE (else null).
export async function blobUrls(slug, sha256, mimeType) {
  const data = await blobBytes(slug, sha256);
  const essence = essenceOf(mimeType);
  return {
    download: URL.createObjectURL(new Blob([data], { type: "application/octet-stream" })),
    preview: PREVIEWABLE.has(essence) ? URL.createObjectURL(new Blob([data], { type: essence })) : null,
    type: essence,
  };
}

// Whether a blob of this type may be shown as an <img> from an object URL: the images of
// PREVIEWABLE, by the same reasoning (so never SVG, whose script would run as the console when
// the object URL is opened in a tab).
export function isPreviewableImage(mimeType) {
  const essence = essenceOf(mimeType);
  return essence.startsWith("image/") && PREVIEWABLE.has(essence);
}

// A typed object URL of an image blob, for a thumbnail; the caller revokes it once shown.
export async function imageUrl(slug, sha256, mimeType) {
  if (!isPreviewableImage(mimeType)) throw new Error(`not a previewable image type: ${mimeType}`);
  const data = await blobBytes(slug, sha256);
  return URL.createObjectURL(new Blob([data], { type: essenceOf(mimeType) }));
}

// Upload with progress (fetch has no upload progress): XMLHttpRequest, same token, same problems.
export function upload(slug, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `${API}/tenants/${encodeURIComponent(slug)}/blobs`);
    xhr.setRequestHeader("Authorization", `Bearer ${session.token}`);
    xhr.setRequestHeader("Content-Type", file.type || "application/octet-stream");
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body);
      else reject(new ApiError(xhr.status, body.title ? body : { title: `HTTP ${xhr.status}` }));
    };
    xhr.onerror = () => reject(new ApiError(0, { title: "Network error", detail: "the upload did not reach the server" }));
    xhr.send(file);
  });
}

// The change feed as server-sent events, read with fetch (EventSource cannot send the token).
// Reconnects by itself with Last-Event-ID, so nothing is missed across a drop.
export function follow(slug, onChange, onState = () => {}) {
  const controller = new AbortController();
  let last = null;
  let stopped = false;
  async function run() {
    while (!stopped) {
      try {
        const extra = last !== null ? { "Last-Event-ID": String(last) } : {};
        const response = await fetch(`${API}/tenants/${encodeURIComponent(slug)}/changes/stream`, {
          headers: headers({ Accept: "text/event-stream", ...extra }),
          signal: controller.signal,
        });
        if (!response.ok) return; // refused (403, 404): nothing to follow
        onState(true);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = {};
            for (const line of block.split("\n")) {
              if (!line || line.startsWith(":")) continue;
              const i = line.indexOf(":");
              const name = i < 0 ? line : line.slice(0, i);
              event[name] = (i < 0 ? "" : line.slice(i + 1)).replace(/^ /, "");
            }
            if (event.id !== undefined) last = Number(event.id);
            if (event.data !== undefined) onChange(JSON.parse(event.data));
          }
        }
      } catch (err) {
        if (stopped) return;
      }
      onState(false);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  run();
  return () => { stopped = true; controller.abort(); };
}
