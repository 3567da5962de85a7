"""Spark jobs over the coordinator's tables: lifecycle report, archive to Parquet, audit."""
