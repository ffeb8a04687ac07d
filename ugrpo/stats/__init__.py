"""Pure tensor math: estimators, U-statistic, exact MSE, variance components, planner.

Imports only torch / numpy / scipy. No I/O, no models.
"""
