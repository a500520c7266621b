"""Transitional: ``Catalog`` lives in :mod:`catalog.core.catalog`; this re-export goes once every importer uses that."""

from catalog.core.catalog import Catalog as Catalog
