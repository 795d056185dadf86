"""What migrated or unmodified programs import at run time (`accelport.compat`, the redirect shim) and machine facts."""
