"""Parallelism strategies written as rank programs: pipeline, data, tensor, and their composition."""
