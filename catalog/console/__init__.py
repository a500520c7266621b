"""The curators' web console (``/console``) and the offline API docs (``/docs``, ``/redoc``).

The console is static files: HTML, CSS and JavaScript modules shipped inside the package, no build
step, no CDN. It is a client of the admin REST API and nothing else: it holds no business logic and
reads no table; what it shows and may do is what the bearer token it signs in with may do there.
Swagger UI and ReDoc are vendored (``vendor/README.md``) so the docs work without internet.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

CONSOLE_PATH = "/console"
ASSETS = f"{CONSOLE_PATH}/assets"
VENDOR = f"{CONSOLE_PATH}/vendor"

# Scripts only from this origin (no inline script, no eval); curator text is set as text, never
# parsed as HTML, so even a stored <script> in a resource stays inert. Blobs are previewed from
# blob: URLs the console makes itself (images, PDFs in a frame); the console itself is never framed.
CONSOLE_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob: data:",
        "object-src 'self' blob:",
        "frame-src 'self' blob:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONSOLE_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


# The docs pages: their own inline start-up script (FastAPI's), ReDoc's inline styles and blob:
# worker; nothing from another origin, so ReDoc's Redocly logo (from its CDN) is never requested.
DOCS_HEADERS = {
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'self'",
            "script-src 'self' 'unsafe-inline'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "worker-src 'self' blob:",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ]
    ),
    "X-Content-Type-Options": "nosniff",
}


def _with_headers(response: HTMLResponse) -> HTMLResponse:
    response.headers.update(DOCS_HEADERS)
    return response


def _package_dir(name: str) -> str:
    return str(resources.files(__name__).joinpath(name))


def install(app: FastAPI) -> None:
    """Serve the console, its assets and the offline docs from ``app``."""
    app.mount(ASSETS, StaticFiles(directory=_package_dir("static")), name="console-assets")
    app.mount(VENDOR, StaticFiles(directory=_package_dir("vendor")), name="console-vendor")
    index = _package_dir("static") + "/index.html"

    @app.get(CONSOLE_PATH, include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(index, media_type="text/html", headers=SECURITY_HEADERS)

    @app.get(f"{CONSOLE_PATH}/", include_in_schema=False)
    async def console_slash() -> RedirectResponse:
        return RedirectResponse(CONSOLE_PATH)

    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return _with_headers(
            get_swagger_ui_html(
                openapi_url=openapi_url,
                title=f"{app.title} — admin API",
                swagger_js_url=f"{VENDOR}/swagger-ui/swagger-ui-bundle.js",
                swagger_css_url=f"{VENDOR}/swagger-ui/swagger-ui.css",
                swagger_favicon_url=f"{VENDOR}/swagger-ui/favicon-32x32.png",
                oauth2_redirect_url=None,
                # No call to validator.swagger.io: the page works, and stays quiet, without internet.
                swagger_ui_parameters={"persistAuthorization": False, "validatorUrl": None},
            )
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return _with_headers(
            get_redoc_html(
                openapi_url=openapi_url,
                title=f"{app.title} — admin API",
                redoc_js_url=f"{VENDOR}/redoc/redoc.standalone.js",
                redoc_favicon_url=f"{VENDOR}/swagger-ui/favicon-32x32.png",
                with_google_fonts=False,
            )
        )
