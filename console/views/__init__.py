"""Console pages: tables and catalogs, processes, the query workbench and storages."""
