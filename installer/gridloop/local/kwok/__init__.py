"""The simulated GPU fleet: kwok's Stages (`stages`) and the fleet's nodes (`nodes`)."""
