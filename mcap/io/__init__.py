"""Files: the versioned JSON forms and the datasets the dashboard opens."""
